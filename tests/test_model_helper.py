"""The local model in a helper process (embedders/helper.py): a one-shot search forks it first
thing, and it gives the in-process model's vectors and errors bit for bit, falls back to the
model in the command's process when the helper is gone, and never outlives the command.

Each case runs in a process of its own: a pytest worker may have threads running, and a
process with threads does not fork a helper (Helper.start returns None there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import write

TEXTS = ["render engine", "DiveAdstra uses DX12 by default.", "渲染引擎的默认设置", "word " * 400]

# Starts a helper, asks it, then compares with the model loaded in this process.
COMPARE = """
import json, os, signal, sys
import numpy as np
from memcore.embedders.helper import Helper
from memcore.embedders.local import HelperEmbedder, OnnxMiniLMEmbedder
texts = json.loads(sys.argv[1])
helper = Helper.start()
assert helper is not None and helper.load(32, 0)
embedder = HelperEmbedder(helper, 32, 0)
if sys.argv[2] == "kill":  # the helper is gone before the first request
    os.kill(helper.pid, signal.SIGKILL)
got = embedder.embed_sync(texts)
here_before = "onnxruntime" in sys.modules  # the model's library, in this process?
still_helped = embedder._helper is not None
own = OnnxMiniLMEmbedder(32, 0).embed_sync(texts)
print(json.dumps({"equal": bool(np.array_equal(got, own)), "shape": list(got.shape),
                  "here_before": here_before, "helped": still_helped}))
"""


def python(program: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env},
    )  # fmt: skip


def test_the_helper_gives_the_in_process_models_vectors_bit_for_bit() -> None:
    done = python(COMPARE, json.dumps(TEXTS), "ask")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"equal": True, "shape": [4, 384], "here_before": False, "helped": True}


def test_a_helper_gone_is_replaced_by_the_model_in_this_process() -> None:
    done = python(COMPARE, json.dumps(TEXTS[:2]), "kill")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"equal": True, "shape": [2, 384], "here_before": True, "helped": False}


MISSING = """
import sys
from pathlib import Path
from memcore.core.errors import EmbedderError
from memcore.embedders import local
from memcore.embedders.helper import Helper
local.ASSETS = Path(sys.argv[1])  # before the fork: the helper finds no model either
helper = Helper.start()
assert helper is not None and helper.load(32, 0)
errors = []
for embedder in (local.HelperEmbedder(helper, 32, 0), local.OnnxMiniLMEmbedder(32, 0)):
    try:
        embedder.embed_sync(["x"])
    except EmbedderError as exc:
        errors.append(str(exc))
print("\\n".join(errors))
"""


def test_the_models_own_error_comes_back_as_its_one_line(tmp_path: Path) -> None:
    done = python(MISSING, str(tmp_path))
    assert done.returncode == 0, done.stderr
    helped, here = done.stdout.splitlines()
    assert helped == here  # the helper's error, word for word the model's own here
    assert helped.endswith("is missing from this installation; reinstall memcore")
    assert str(tmp_path) in helped


ENDED = """
import os, sys, time
from memcore.embedders.helper import Helper
helper = Helper.start()
assert helper is not None
pid = helper.pid
helper.discard()
helper.discard()  # once only: a second call touches nothing
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    if state in ("Z", "gone"):
        break
    time.sleep(0.01)
print(state)
"""


def test_a_discarded_helper_ends_at_once() -> None:
    done = python(ENDED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("Z", "gone")  # dead; reaped when this process ends


# The `memcore` command as its own process (main() with no arguments, as the entry point
# calls it), saying on stderr's last line whether its own process loaded onnxruntime.
COMMAND = """
import os, sys
exit_now = os._exit
def leave(code):
    sys.stderr.write("\\nORT:" + str("onnxruntime" in sys.modules))
    exit_now(code)
os._exit = leave
from memcore.cli import main
sys.argv = ["memcore", *sys.argv[1:]]
main()
"""


def command(vault: Path, *args: str, **env: str) -> tuple[int, str, str, str]:
    done = python(COMMAND, "--vault", str(vault), *args, **env)
    err, _, ort = done.stderr.rpartition("\nORT:")
    return done.returncode, done.stdout, err, ort


def test_a_one_shot_search_embeds_in_the_helper_and_prints_what_typer_prints(
    vault: Path,
) -> None:
    write(vault, "MEMORY.md", "# Memory\n\n## Engine\nDiveAdstra uses DX12 by default.\n")
    write(vault, "memory/notes.md", "# Notes\n\nThe studio ships on Fridays.\n")
    subprocess.run([sys.executable, "-m", "memcore", "--vault", str(vault), "index"],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    code, out, err, ort = command(vault, "search", "which renderer", "--json")
    typer = subprocess.run(
        [sys.executable, "-c", "import sys; from memcore.cli import app; app.main(sys.argv[1:])",
         "--vault", str(vault), "search", "which renderer", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (code, err, ort) == (0, "", "False")  # answered, and not by this process's model
    assert json.loads(out) == json.loads(typer.stdout)
    assert json.loads(out)["results"][0]["path"] == "MEMORY.md"
    code, out, err, ort = command(vault, "context", "does DiveAdstra use DX12 by default")
    assert (code, err, ort) == (0, "", "False") and "DX12" in out


def test_an_add_with_no_daemon_embeds_in_the_helper(vault: Path) -> None:
    """`memcore add` (typer runs it when no daemon does) embeds the new memory in the helper:
    the command's process never loads onnxruntime, and the memory is found by its vector at
    once, with the vector the in-process model gives."""
    write(vault, "MEMORY.md", "# Memory\n\n## Engine\nDiveAdstra uses DX12 by default.\n")
    subprocess.run([sys.executable, "-m", "memcore", "--vault", str(vault), "index"],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    code, out, err, ort = command(vault, "add", "Gina plays the cello on Sundays", "--user", "gina")
    assert (code, err, ort) == (0, "", "False")
    assert "Gina plays the cello on Sundays" in out
    code, out, err, ort = command(vault, "search", "which instrument does Gina play", "--json")
    hit = json.loads(out)["results"][0]
    assert hit["text"] == "Gina plays the cello on Sundays" and hit["vector_score"] > 0.4
    # the same text again: nothing to embed (its vector is known); the helper is let go
    code, out, err, ort = command(vault, "add", "Gina plays the cello on Sundays", "--user", "gina")
    assert (code, ort) == (0, "False"), err
