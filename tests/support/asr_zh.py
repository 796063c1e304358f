"""The offline Chinese recognizer (Whisper base + OpenCC) for tests: it lives in
:mod:`streams.bench.asr_zh`, where ``ttsflow bench engine --backend kokoro --wer`` uses it too."""

from streams.bench.asr_zh import (
    SENTENCES,
    available,
    char_error,
    char_error_many,
    corpus_cer,
    model_dir,
    normalize_zh_text,
    recognize,
)

__all__ = ["SENTENCES", "available", "char_error", "char_error_many", "corpus_cer", "model_dir", "normalize_zh_text",
           "recognize"]
