"""Reference recipes (training-time preprocessing) and the reference model."""

from __future__ import annotations

from harness.reference.base import BUILT_IN, Recipe
from harness.reference.custom import CallableRecipe, ComposeRecipe, is_compose, load_object
from harness.reference.recipes import DaliRecipe, OpenCVRecipe, TorchRecipe, TorchvisionRecipe  # registers them
from harness.spec import Preprocess, Spec, SpecError


def load_recipe(spec: Spec, reference: str | None = None, preprocess: Preprocess | None = None) -> Recipe:
    """The reference recipe: ``reference`` (a built-in name or ``file.py:name``), or the
    spec's ``[reference] recipe``; built-ins read ``preprocess`` (default: the spec's
    reference parameters)."""
    choice = reference or spec.reference.recipe
    if choice in BUILT_IN:
        return BUILT_IN[choice](preprocess or spec.reference.preprocess)
    if choice == "custom":
        raise SpecError("the spec's reference recipe is 'custom': give it with --reference path/to/file.py:name")
    obj = load_object(choice)
    name = choice.rpartition(":")[2]
    if is_compose(obj):
        return ComposeRecipe(obj, name)
    if callable(obj):
        return CallableRecipe(obj, name)
    raise SpecError(f"reference {choice!r} is a {type(obj).__name__}, not a torchvision Compose or a callable")


__all__ = ["BUILT_IN", "Recipe", "load_recipe", "OpenCVRecipe", "TorchvisionRecipe", "TorchRecipe", "DaliRecipe", "ComposeRecipe",
           "CallableRecipe"]
