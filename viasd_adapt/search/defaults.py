"""The calibration sizes every search starts from, importable without torch (the CLI reads them
for its option defaults at start-up; :mod:`viasd_adapt.search.decoder_windows` re-exports them)."""

DEFAULT_CALIB_PROMPTS = 16
DEFAULT_HELDOUT_PROMPTS = 16
DEFAULT_NEW_TOKENS = 48
DEFAULT_PROMPT_TOKENS = 64
