"""Side venvs for trainers whose pins clash with requirements.lock, under bench/out/interop/<name>/
(ignored by git), each with this checkout's `src/` on its path and what scoring needs.

    .venv/bin/python -m jacrl.interop.sidevenv verl      # verl 0.9.1: transformers < 5.11 (the lock has 5.24)
    bench/out/interop/verl/bin/python -m pytest -q tests/interop/test_verl.py

verifiers 0.4 and TRL 1.16 install beside the lock's pins (the `env` and `bench` extras), and
prime-rl does not install here at all (docs/interop.md says why), so only verl has one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jacrl import cli

ROOT = Path(__file__).resolve().parents[3]
SIDE = ROOT / "bench" / "out" / "interop"
SCORING = ["jaclang==0.16.7", "pyyaml>=6", "psutil>=5.9", "pytest>=8", "pytest-timeout>=2.3"]
SETUP = {
    "verl": ["verl==0.9.1", "transformers>=5.5.3,<5.11,!=5.6.0", *SCORING],
}


def setup(name: str, python: str = "python3.12") -> Path:
    """Create (or update) the side venv `name`; returns its folder."""
    venv = SIDE / name
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", *SETUP[name]], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # This checkout's library, not an installed copy: the venv scores with the code under test.
    (Path(purelib) / "jacrl-src.pth").write_text(f"{ROOT / 'src'}\n{ROOT / 'tests'}\n")
    return venv


def main(argv: list[str] | None = None) -> int:
    p = cli.parser("python -m jacrl.interop.sidevenv", __doc__)
    p.add_argument("name", choices=sorted(SETUP), help="the trainer whose side venv to create")
    p.add_argument("--python", default="python3.12", help="the interpreter to build it from (jaclang needs >= 3.12)")
    args = p.parse_args(argv)
    return cli.run(lambda: print(setup(args.name, args.python)) or 0)


if __name__ == "__main__":
    sys.exit(main())
