"""The decoding engine: drafters, the decoder-only verifier seam, the draft -> verify loop, the
encoder-decoder loop and the set-up every adapter opens a tier with (:mod:`.tier`)."""
