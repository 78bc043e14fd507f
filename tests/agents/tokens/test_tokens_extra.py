"""Without the tokens extra (transformers, peft, tokenizers) the token modules import, and
their use names the extra. Each check runs in a child interpreter that cannot import those
three packages (torch stays), so it holds with every extra installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

HIDE = textwrap.dedent(
    """
    import importlib.abc, sys
    HIDDEN = {"transformers", "peft", "tokenizers"}

    class _Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _Hide())
    """
)


@pytest.mark.parametrize(
    ("code", "package"),
    [
        (
            "from fleetgym.agents.tokens import TokenPolicy\n"
            "import gymnasium as gym\n"
            "TokenPolicy.from_pretrained('.', obs_dim=3, action_space=gym.spaces.Discrete(2))",
            "transformers",
        ),
        (
            "from fleetgym.agents.tokens import InstructionTokenizer\nInstructionTokenizer()",
            "tokenizers",
        ),
        (
            "from fleetgym.agents.tokens import apply_lora\nimport torch\napply_lora(torch.nn.Linear(2, 2))",
            "peft",
        ),
    ],
)
def test_a_token_feature_without_the_tokens_extra_names_it(code, package):
    body = textwrap.indent(code, " " * 4)
    script = (
        HIDE
        + "from fleetgym.errors import DependencyNotInstalled\n"
        + f"try:\n{body}\nexcept DependencyNotInstalled as error:\n"
        + "    print('EXTRA', error.extra, '|', error)\nelse:\n    print('NO ERROR')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("EXTRA tokens |"), last
    assert package in last and 'pip install "fleetgym[tokens]"' in last
