"""The folder's own proof (issue 57): its ``README.md`` says what each deployment in it is, the
versions it was written for (``deploy/versions.toml``), what its check on the deploy run found (the
check's report copied beside it, ``NAME.check.md`` and ``.json``) and the commands that check it
again on a GPU host. Files at the folder's root only: Triton takes every folder of a repository
for a model (without explicit model control, a ``proof/`` folder fails the server's start)."""

from __future__ import annotations

import shutil
from pathlib import Path

README = "README.md"
PROOF = {"report.md": "{}.check.md", "report.json": "{}.check.json"}
"""The check's report files -> their names in the folder, ``{}`` the deployment's name."""
UNNAMED = "deployment"
"""The name of a deployment under this project's own names (no ``--name``), in the README and its proof."""


def keep_proof(folder: Path, name: str | None, report: Path) -> None:
    """The check's report (``report``, its folder) copied into ``folder`` as ``NAME.check.md`` and ``.json``."""
    for file, kept in PROOF.items():
        if (report / file).is_file():
            shutil.copyfile(report / file, folder / kept.format(name or UNNAMED))


def set_aside_proof(folder: Path, name: str, version: int) -> None:
    """``name``'s check (of its model's ``version``) renamed ``NAME.vN.check.md`` and ``.json`` in ``folder``: a new
    version is what the ensemble calls now, and the README's verdict must be that version's (or "not checked")."""
    for kept in PROOF.values():
        if (folder / kept.format(name)).is_file():
            (folder / kept.format(name)).rename(folder / kept.format(f"{name}.v{version}"))


def readme(folder: Path, deployments: dict[str, tuple[str, str, str, tuple[int, ...]]], manifest) -> str:
    """The README of ``folder``: ``deployments`` is name (:data:`UNNAMED`: this project's names) -> (the
    ensemble clients call, the model, the training definition it was deployed for, the model's versions)."""
    lines = ["# A Triton deployment written by `harness deploy`", "",
             f"Written for Triton {manifest.release} (server {manifest.server.version}; its DALI {manifest.dali.version}, "
             f"TensorRT {manifest.tensorrt.version}, CUDA {manifest.cuda.version}): `{manifest.server.image}`, the engine "
             f"built in `{manifest.tensorrt.image}` (an engine loads only in the TensorRT that built it).", "",
             "| deployment | clients call | model | its check on the deploy run |", "|---|---|---|---|"]
    for name, (ensemble, model, _, versions) in sorted(deployments.items()):
        proof = folder / PROOF["report.md"].format(name)
        found = _verdict(proof) if proof.is_file() else "not checked (deployed with --no-check)"
        link = f"[{found}]({proof.name})" if proof.is_file() else found
        earlier = [f"[version {v}]({PROOF['report.md'].format(f'{name}.v{v}')})" for v in versions
                   if (folder / PROOF["report.md"].format(f"{name}.v{v}")).is_file()]
        served = "" if len(versions) == 1 else (f" versions {', '.join(map(str, versions))}, each in its version folder "
                                                f"(the ensemble calls the latest, {max(versions)}, whose check is beside"
                                                + (f"; earlier checks: {', '.join(earlier)}" if earlier else "") + ")")
        lines.append(f"| {name} | `{ensemble}` | `{model}`{served} | {link} |")
    lines += ["", "## Serve it and check it again", "",
              "On a GPU host, from this folder (set `TRITON_ADMIN_KEY`, see the harness's docs/gpu.md). Both images "
              "are built from this folder alone: put the harness's wheel here first.", "", "```sh",
              "pip wheel --no-deps HARNESS_PROJECT -w .   # the harness's wheel (*.whl), which both images install",
              "docker compose up -d        # builds each TensorRT engine, then serves every model of this folder",
              "# or on Kubernetes, the two images pushed to your registry (harness-triton, harness-engine-builder):",
              "#   kubectl create secret generic triton-admin-key --from-literal=key=$(openssl rand -hex 32)",
              "#   kubectl apply -f kubernetes.json   # the volume, the engine-build Job, Triton, its Service and policy"]
    for name, (_, _, reference, _) in sorted(deployments.items()):
        named = "" if name == UNNAMED else f" --deployment {name}"
        lines.append(f"harness check PHOTOS --repository .{named} --url HOST:8001 --reference '{reference}'")
    lines += ["harness preflight --url HOST:8001 --repository .",
              "```", "",
              "`harness preflight` compares the host's Triton, DALI and TensorRT with the versions above; its "
              "known-answer checks read this project's own model names (a deployment under `--name` is checked by "
              "`harness check --deployment NAME`). On a machine without a GPU, `harness serve --repository .` serves "
              "the cpu profile (the same DALI graph on DALI's CPU kernels, the model in ONNX Runtime).", ""]
    return "\n".join(lines)


def _verdict(report_md: Path) -> str:
    """The report's verdict line (its first bold line: ``No stage diverged.``, ``First divergent stage: ...``)."""
    for line in report_md.read_text().splitlines():
        if line.startswith("**"):
            return line.strip("*").strip()
    return "see the report"
