"""Named sizes and training budgets for self-trained model pairs.

``tiny`` exists for tests: it builds in seconds and proves the pipeline, not the method.
``demo`` is the pair shipped inside the package (``viasd_adapt/assets/demo``). Its design:

* a deep, narrow target (16 Llama decoder layers, hidden 160) so that layer routing has many
  layers to choose from and each layer is a small residual update;
* the target is trained with stochastic depth (LayerDrop, as in LayerSkip): on half of the
  training steps a random number of layers, up to half of them, is replaced by an identity
  pass-through (the residual stream goes on unchanged). Each layer is skipped on about 15% of the
  steps; layer 0 is never skipped. This is what makes a slim verifier, the target with about 45%
  of its layers skipped, agree with the full target far more often than the drafter does;
* a 1-layer drafter of the same width on the same tokenizer, trained plainly and FIRST: the
  target's token embedding (tied with its output head) starts from the drafter's trained one.
  Without that head start the deep, narrow target spends its first ~100 steps on the unigram
  plateau and, within this budget, ended up worse than the drafter (held-out loss 4.23 vs 3.61);
* both fit, in fp16, within the 16 MB the package may carry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from viasd_adapt.errors import ConfigError


@dataclass(frozen=True)
class ModelShape:
    """The size of one Llama model; vocabulary and context come from the preset."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int


@dataclass(frozen=True)
class TrainingBudget:
    """How long and how hard one model is trained."""

    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    weight_decay: float = 0.1
    # Fraction of steps on which some layers are skipped (0 disables LayerDrop).
    layerdrop_step_fraction: float = 0.0
    # On such a step, between 1 and round(layerdrop_max_ratio * num_layers) layers are skipped.
    layerdrop_max_ratio: float = 0.0
    # Early-exit training (LayerSkip-style): the shared final norm + LM head are also applied to
    # the residual stream entering each of these layers, and their mean cross-entropy is added to
    # the loss with this weight. It makes "the first k layers" a good slim verifier.
    early_exit_layers: tuple[int, ...] = ()
    early_exit_weight: float = 0.0


@dataclass(frozen=True)
class Preset:
    """Everything ``build_pair`` needs besides the seed."""

    name: str
    vocab_size: int
    seq_len: int
    target: ModelShape
    draft: ModelShape
    target_training: TrainingBudget
    draft_training: TrainingBudget
    # Train the drafter first and start the target's token embedding from the drafter's
    # (needs equal hidden sizes); see ``build._copy_embedding`` for why.
    target_embedding_from_draft: bool = True
    # Cap on training text (characters); None = the whole train split.
    max_train_chars: int | None = None
    # Evaluation: held-out sequences for loss/agreement, prompts and tokens for acceptance.
    eval_sequences: int = 64
    eval_prompts: int = 100
    eval_new_tokens: int = 32
    speculation_length: int = 4
    mask_ratio: float = 0.45
    report_masks: int = 5
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.target_embedding_from_draft and self.target.hidden_size != self.draft.hidden_size:
            raise ConfigError(
                f"preset {self.name!r}: the target's embedding starts from the drafter's, so their "
                f"hidden sizes must match ({self.target.hidden_size} != {self.draft.hidden_size})"
            )
        if not 0.0 < self.mask_ratio < 1.0:
            raise ConfigError(f"preset {self.name!r}: mask_ratio must be in (0, 1), got {self.mask_ratio}")

    def to_dict(self) -> dict:
        return asdict(self)


TINY = Preset(
    name="tiny",
    vocab_size=512,
    seq_len=64,
    target=ModelShape(hidden_size=64, num_layers=12, num_heads=4, intermediate_size=172),
    draft=ModelShape(hidden_size=64, num_layers=1, num_heads=4, intermediate_size=172),
    target_training=TrainingBudget(
        steps=60, batch_size=8, learning_rate=3e-3, warmup_steps=6,
        layerdrop_step_fraction=0.5, layerdrop_max_ratio=0.5,
    ),
    draft_training=TrainingBudget(steps=60, batch_size=8, learning_rate=3e-3, warmup_steps=6),
    max_train_chars=400_000,
    eval_sequences=8,
    eval_prompts=4,
    eval_new_tokens=8,
    report_masks=2,
    notes="for tests only: proves the pipeline, not the method",
)

DEMO = Preset(
    name="demo",
    vocab_size=4096,
    seq_len=256,
    target=ModelShape(hidden_size=160, num_layers=16, num_heads=5, intermediate_size=432),
    draft=ModelShape(hidden_size=160, num_layers=1, num_heads=5, intermediate_size=432),
    target_training=TrainingBudget(
        steps=640, batch_size=16, learning_rate=2e-3, warmup_steps=30,
        layerdrop_step_fraction=0.5, layerdrop_max_ratio=0.5,
    ),
    draft_training=TrainingBudget(steps=640, batch_size=16, learning_rate=2e-3, warmup_steps=30),
    notes="shipped in viasd_adapt/assets/demo",
)

DEMO_EE = replace(
    DEMO,
    name="demo-ee",
    target_training=replace(DEMO.target_training, early_exit_layers=(6, 8, 10), early_exit_weight=0.5),
    notes="the demo pair with a target trained for early exit (LayerSkip-style exit losses at layers 6, 8, 10); "
    "shipped in viasd_adapt/assets/demo-ee",
)

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (TINY, DEMO, DEMO_EE)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``, or a ConfigError listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(sorted(PRESETS))}") from None
