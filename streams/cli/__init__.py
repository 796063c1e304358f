"""The ``ttsflow`` command line.

Each sub-command lives in its own module and is imported only when used, so
``ttsflow stack status`` does not load a voice model. A command module exposes
``main(argv: list[str]) -> int``; errors a person can fix print one line and exit
non-zero.
"""

from __future__ import annotations

import importlib
import sys

from streams.errors import SettingsError

__all__ = ["main"]

# name -> (module, one-line help)
_COMMANDS: dict[str, tuple[str, str]] = {
    "stack": ("streams.cli.stack", "start, stop or inspect the local Kafka/Redis/S3 stack"),
    "stage": ("streams.stage.main", "run the CPU stream stage (faust): validate, normalize, split"),
    "worker": ("streams.worker.main", "run a synthesis worker (exactly-once, micro-batched)"),
    "gateway": ("streams.gateway.main", "serve the OpenAI-compatible speech API (POST /v1/audio/speech) on the pipeline"),
    "run": ("streams.devstack.run", "the stack, a stage, N workers and the gateway in the foreground; Ctrl-C stops all"),
    "synth": ("streams.cli.synth", "speak TEXT into a file with the engine directly, no Kafka"),
    "model": ("streams.cli.model", "convert (fp16/int8), install and reload model versions"),
    "voices": ("streams.cli.voices", "list the installed voices: backend, languages, sample rate (--json)"),
    "bench": ("streams.bench", "benchmarks that print one JSON object: engine, sweep, stage, pipeline, baseline, latency, soak, gateway, bigrequest, align, streaming-input"),
    "demo": ("streams.bench.demo", "run the whole local pipeline on the demo corpus"),
    "chaos": ("streams.bench.chaos", "kill workers, stage and broker mid-run and count lost/duplicated completions"),
    "say": ("streams.client.cli", "publish TEXT, wait for its completion, save the audio"),
    "submit": ("streams.client.cli", "publish a file of requests and collect the audio"),
    "watch": ("streams.client.cli", "tail completions as they commit"),
    "fetch": ("streams.client.cli", "download a completed request's audio"),
    "lexicon": ("streams.client.cli", "store, show, list or delete pronunciation lexicons (W3C PLS) on their topic"),
    "phonemize": ("streams.cli.phonemize", "print what a voice will say for TEXT (normalization, lexicons, SSML, G2P)"),
    "lag": ("streams.ops.lag.cli", "consumer-group lag, Burrow-style status and desired replicas"),
    "scale": ("streams.ops.scale", "simulate lag-based scaling against a request-rate trace"),
}


def _usage() -> str:
    width = max(map(len, _COMMANDS))
    lines = ["usage: ttsflow COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in _COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in _COMMANDS:
        print(f"ttsflow: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(_COMMANDS[name][0])
    fn = getattr(module, "main_" + name, None) or module.main
    try:
        return int(fn(rest) or 0)
    except KeyboardInterrupt:
        return 130
    except SettingsError as e:  # a command that reads its settings late: the same one line as at start
        print(f"ttsflow {name}: {e}", file=sys.stderr)
        return 2

