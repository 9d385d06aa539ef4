"""viasd-adapt: a slim-verifier tier (VIA-SD) for existing speculative-decoding frameworks."""

__version__ = "0.1.0"
