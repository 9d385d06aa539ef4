"""Settings and artifacts: what a run uses, and what the files it reads and writes say.

Every JSON file viasd-adapt writes is a typed, versioned artifact (:mod:`.schema`): the routing
mask (:mod:`.mask`), ``tuned.json`` (:mod:`.tuned`), ``pair.json`` (:mod:`.pair_file`), the
``viasd tune --json`` points (:mod:`.tune_points`), ``build_report.json`` (:mod:`.build_report`) and
the ``--costs`` files (:mod:`.costs`); each kind has one reader, its class's ``load``. The one
resolver (:mod:`.resolve`) stacks defaults, ``tuned.json``, presets and flags into a run's
settings; :mod:`.budget` says what "within the fidelity budget" means. No module here imports
torch: the CLI and the vLLM plugin read these files before (or without) loading a model.
"""
