"""What an operation is (:class:`Operation`: its keys, kernels, refusals, alternatives and
wording); the registry of them is :mod:`harness.operations`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from harness.stage import Stage

BACKENDS = ("opencv", "torchvision", "torch", "dali")
"""The libraries an operation has kernels for, named as the recipes are: ``opencv`` (numpy and
OpenCV: the ``preprocess_opencv`` model and the ``opencv`` recipe), ``torchvision`` (PIL images
where PIL filters, tensors otherwise), ``torch`` (torchvision on tensors only), ``dali`` (graph
nodes: the DALI models and the ``dali`` recipe)."""


@dataclass(frozen=True)
class Key:
    """One spec key an operation owns, as DALI's schema declares an argument."""

    table: str
    """The spec table it is in (``input``, ``normalize``, ...)."""
    name: str
    default: Any
    choices: tuple = ()
    """The values it takes (empty: any value of its type)."""
    doc: str = ""
    omitted_at_default: bool = False
    """Left out of a spec's table at its default (a key added later: tables written before read the same)."""
    applies: Callable[[Any], bool] | None = None
    """Whether a spec uses the key (None: always): a key it does not use is not checked."""

    @property
    def path(self) -> str:
        """``table.name``, as advice and errors name it."""
        return f"{self.table}.{self.name}"

    def check(self, value: Any, where: str) -> str | None:
        """Why ``value`` is not one of :attr:`choices` (None where it is, or where any value goes)."""
        if self.choices and value not in self.choices:
            return f"{where}{self.path} = {value!r}; expected one of {', '.join(map(str, self.choices))}"
        return None

    def table_of(self, value: Any) -> dict[str, dict[str, Any]]:
        """``{table: {name: value}}``: the spec table setting this key (a hypothesis's overrides)."""
        return {self.table: {self.name: value}}


@dataclass(frozen=True)
class Alternative:
    """A value users get wrong for an operation: one of diagnose's hypotheses (the reference
    with this change), as :class:`harness.diagnose.catalogue.Hypothesis` takes it."""

    name: str
    culprit: str
    overrides: Mapping[str, Mapping[str, Any]]
    bgr_images: bool = False
    """Compare the image stages in BGR order (the decoder's order kept from the start)."""
    recipe: str | None = None
    """Another library doing the same preprocessing (None: the reference's own)."""


Kernel = Callable[..., Any]
"""One backend's kernel: ``(value of the stage so far, spec's Preprocess) -> value``."""
Refusal = Callable[[Any], "str | None"]
"""Why a backend's kernel cannot do a spec's values (None: it can)."""


@dataclass
class Operation:
    """One preprocessing operation: its keys, kernels, alternatives and wording."""

    name: str
    """What it is called in words (``channel order``): the culprit of its hypotheses."""
    stage: Stage
    """The stage whose step runs its kernels (in registration order, :func:`apply`)."""
    keys: tuple[Key, ...]
    hint: str
    """Where a divergence of its stage may come from, in the stage's hint (:mod:`harness.results.hints`)."""
    alternatives: Callable[[str, Any, Any], list[Alternative]] = lambda recipe, reference, deployed: []
    """``(reference's recipe, reference Preprocess, deployed Preprocess) -> [Alternative]``:
    diagnose's hypotheses."""
    describe: Callable[[Any, str], str] = lambda p, recipe: ""
    """``(Preprocess, recipe) -> words``, for a preprocessing's fingerprint."""
    invalid: Callable[[Any], "str | None"] = lambda p: None
    """Why a spec's values of its keys do not go together (None: they do), whatever the backend."""
    partners: tuple[tuple[str, str], ...] = ()
    """Its compound alternatives: pairs of culprits (of its alternatives, or another operation's)
    whose settings only make sense together, which diagnose tries as one hypothesis before it
    gives up (a half that improves the stage too little alone is not dropped without its partner)."""
    kernels: dict[str, Kernel] = field(default_factory=dict)
    refusals: dict[str, Refusal] = field(default_factory=dict)

    def kernel(self, backend: str, refuses: Refusal | None = None) -> Callable[[Kernel], Kernel]:
        """Register the decorated function as this operation's kernel for ``backend``;
        ``refuses(p)`` says why it cannot do a spec's values (None: it can)."""
        if backend not in BACKENDS:
            raise ValueError(f"{self.name}: no backend {backend!r}; backends: {', '.join(BACKENDS)}")

        def register(function: Kernel) -> Kernel:
            if backend in self.kernels:
                raise ValueError(f"{self.name} has a {backend} kernel already")
            self.kernels[backend] = function
            if refuses is not None:
                self.refusals[backend] = refuses
            return function

        return register

    def refusal(self, backend: str, p: Any) -> str | None:
        """The one rule: why ``backend`` cannot do this operation as ``p`` asks (no kernel, or
        its kernel refuses the values); None where it can."""
        if self.kernels and backend not in self.kernels:  # (no kernels at all: its arithmetic is elsewhere yet)
            return f"{backend} has no kernel for the {self.name}"
        refuses = self.refusals.get(backend)
        return refuses(p) if refuses is not None else None
