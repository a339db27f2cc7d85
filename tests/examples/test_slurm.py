"""The COMPSs launchers in examples/slurm use only real option names.

Checked against the launch scripts of COMPSs 3.3 (the ``scripts`` folder
of the PyCOMPSs sources, found as ``tests/_compss_sources`` says);
skipped, saying how to lay them out, where they are absent.
"""

import glob
import os
import re
import xml.etree.ElementTree as ElementTree

import pytest

from tests._compss_sources import SCRIPTS, needs_sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SLURM = os.path.join(ROOT, "examples", "slurm")
# The launchers that run COMPSs; dask_*.sh start dask (checked below).
COMPSS_LAUNCHERS = [p for p in glob.glob(os.path.join(SLURM, "*.sh"))
                    if not os.path.basename(p).startswith("dask_")]


def _launcher_options(path):
    """Options given to runcompss / enqueue_compss in a launcher script."""
    with open(path) as f:
        text = f.read()
    options = set(re.findall(r"^\s+--([a-z_]+)", text, re.MULTILINE))
    options |= set(re.findall(r'"--([a-z_]+)=\$', text))
    return options


def _docs_commands():
    """The runcompss / enqueue_compss commands in docs/hpc.md's blocks,
    each as the set of options given before the application's script."""
    with open(os.path.join(ROOT, "docs", "hpc.md")) as f:
        blocks = re.findall(r"```bash\n(.*?)```", f.read(), re.DOTALL)
    commands = []
    for block in blocks:
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            words = line.split()
            if words and words[0] in ("runcompss", "enqueue_compss"):
                app = next(i for i, w in enumerate(words) if
                           w.endswith(".py"))
                commands.append({m for w in words[1:app] for m in
                                 re.findall(r"^--([a-z_]+)", w)})
    return commands


def _readme_options():
    """Options the README explains for the COMPSs launchers (its dask
    section, last, is checked against dask)."""
    with open(os.path.join(SLURM, "README.md")) as f:
        text = f.read().split("## SLURM without COMPSs")[0]
    return set(re.findall(r"^\| `--([a-z_]+)", text, re.MULTILINE)) | set(
        re.findall(r"`--([a-z_]+)`", text))


def _reference_text():
    text = ""
    for path in glob.glob(os.path.join(SCRIPTS, "*")):
        with open(path, errors="replace") as f:
            text += f.read()
    return text


@needs_sources
@pytest.mark.parametrize("script", ["enqueue_4x4_gpus.sh",
                                    "run_workstation.sh"])
def test_launcher_options_exist_in_compss(script):
    reference = _reference_text()
    options = _launcher_options(os.path.join(SLURM, script))
    assert {"lang", "python_interpreter", "pythonpath"} <= options
    unknown = sorted(o for o in options
                     if not re.search(rf"--{o}[=< ]", reference))
    assert unknown == []


@needs_sources
def test_readme_explains_every_option_and_names_only_real_ones():
    reference = _reference_text()
    used = set()
    for script in COMPSS_LAUNCHERS:
        used |= _launcher_options(script)
    explained = _readme_options()
    assert used <= explained, sorted(used - explained)
    unknown = sorted(o for o in explained
                     if not re.search(rf"--{o}[=< ]", reference))
    assert unknown == []


@needs_sources
def test_docs_commands_name_only_real_options():
    reference = _reference_text()
    commands = _docs_commands()
    assert len(commands) >= 3
    unknown = sorted(o for options in commands for o in options
                     if not re.search(rf"--{o}[=< ]", reference))
    assert unknown == []


def test_a_worker_in_the_master_gets_its_memory():
    # launch_compss refuses worker_in_master_cpus > 0 without a memory
    # (unless a site default gives one).
    commands = _docs_commands() + [
        _launcher_options(path) for path in COMPSS_LAUNCHERS]
    with_cpus = [c for c in commands if "worker_in_master_cpus" in c]
    assert with_cpus
    assert all("worker_in_master_memory" in c for c in with_cpus)


@pytest.mark.parametrize("name", ["resources.xml", "project.xml"])
def test_xml_files_parse(name):
    root = ElementTree.parse(os.path.join(SLURM, name)).getroot()
    nodes = root.findall("ComputeNode")
    assert [n.get("Name") for n in nodes] == ["localhost"]
    if name == "resources.xml":
        kinds = {p.get("Name"): p.findtext("ComputingUnits")
                 for p in nodes[0].findall("Processor")}
        assert kinds == {"MainProcessor": "8", "GPU": "2"}


def _dask_commands(path):
    """``{"scheduler": options, "worker": options}`` given to the dask
    CLI in a job script (continuation lines joined)."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        match = re.search(r"\bdask (scheduler|worker)\b(.*)", line)
        if match:
            found.setdefault(match.group(1), set()).update(
                re.findall(r"(?<!\S)--([a-z][a-z-]*)", match.group(2)))
    return found


def test_dask_job_script_sets_only_real_dask_settings():
    # Each DASK_* variable of the job script names a key of dask's
    # configuration (a misspelt one would be ignored in silence).
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with open(os.path.join(SLURM, "dask_4x4_gpus.sh")) as f:
        names = set(re.findall(r"\bDASK_([A-Z_]+)=", f.read()))
    assert {"DISTRIBUTED__SCHEDULER__WORK_STEALING",
            "DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"} <= names
    for name in names:
        key = ".".join(part.lower().replace("_", "-")
                       for part in name.split("__"))
        assert dask.config.get(key, "missing") != "missing", name


def test_dask_job_script_names_only_real_dask_options():
    # examples/slurm/dask_4x4_gpus.sh against the installed dask CLI.
    pytest.importorskip("distributed")
    import subprocess
    import sys
    commands = _dask_commands(os.path.join(SLURM, "dask_4x4_gpus.sh"))
    assert set(commands) == {"scheduler", "worker"}
    assert {"scheduler-file", "nthreads", "resources"} <= \
        commands["worker"]
    for kind, options in commands.items():
        help_text = subprocess.run(
            [sys.executable, "-m", f"distributed.cli.dask_{kind}",
             "--help"], capture_output=True, text=True, check=True).stdout
        real = set(re.findall(r"--([a-z][a-z-]*)", help_text))
        assert options - real == set(), (kind, sorted(options - real))
