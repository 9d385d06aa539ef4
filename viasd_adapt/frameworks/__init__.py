"""The frameworks the commands can run, by name (:mod:`.registry`), the request and output types
every runner speaks (:mod:`.requests`), and the runners of the baselines (:mod:`.baselines`,
:mod:`.seq2seq`). Adapters register their runners by ``"module:function"`` string."""
