"""Reference recipes (training-time preprocessing) and the reference model."""

from __future__ import annotations

from harness.reference.base import BUILT_IN, Recipe
from harness.reference.custom import CallableRecipe, ComposeRecipe, is_compose, load_object, takes_pil_image
from harness.reference.recipes import DaliRecipe, OpenCVRecipe, TorchRecipe, TorchvisionRecipe  # registers them
from harness.spec import Preprocess, Spec, SpecError


def load_recipe(spec: Spec, reference: str | None = None, preprocess: Preprocess | None = None) -> Recipe:
    """The reference recipe: ``reference`` (a built-in name or ``file.py:name``), or the
    spec's ``[reference] recipe``; built-ins read ``preprocess`` (default: the spec's
    reference parameters)."""
    from harness.reference.reading import is_framework_source, read_source, read_transform, reading_recipe

    choice = reference or spec.reference.recipe
    if choice in BUILT_IN:
        return BUILT_IN[choice](preprocess or spec.reference.preprocess)
    if choice == "custom":
        raise SpecError("the spec's reference recipe is 'custom': give it with --reference path/to/file.py:name")
    if is_framework_source(choice):  # torchvision:WEIGHTS, timm:..., hf:...
        return reading_recipe(read_source(choice))
    obj = load_object(choice)
    name = choice.rpartition(":")[2]
    if is_compose(obj):
        recipe = ComposeRecipe(obj, name)
    elif callable(obj):
        recipe = CallableRecipe(obj, name, pil=takes_pil_image(obj))
    else:
        raise SpecError(f"reference {choice!r} is a {type(obj).__name__}, not a torchvision Compose or a callable")
    if is_compose(obj) or type(obj).__module__.startswith("torchvision.transforms"):  # read, proven on the photos
        recipe.reading = read_transform(obj, choice)
    return recipe


__all__ = ["BUILT_IN", "Recipe", "load_recipe", "OpenCVRecipe", "TorchvisionRecipe", "TorchRecipe", "DaliRecipe", "ComposeRecipe",
           "CallableRecipe"]
