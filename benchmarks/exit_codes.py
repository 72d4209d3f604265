"""Exit status of merge, check and view over many runs: correct work must end with exit 0.

deltalake's pyarrow-dataset read path (DeltaTable.to_pyarrow_table) aborted processes at exit
("terminate called without an active exception", exit 134) after correct output; popcorn reads
through DataFusion instead. Usage: python benchmarks/exit_codes.py [RUNS] [--bare]; --bare also
runs the minimal deltalake reproduction both ways. Prints a table of exit codes per command.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BARE = {
    "to_pyarrow_table (deltalake)": "from deltalake import DeltaTable; print(DeltaTable(r'{uri}').to_pyarrow_table().num_rows)",
    "QueryBuilder (DataFusion)": "from deltalake import DeltaTable, QueryBuilder; "
                                 "print(QueryBuilder().register('t', DeltaTable(r'{uri}')).execute('select * from t')"
                                 ".read_all().num_rows)",
}


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200
    tmp = Path(tempfile.mkdtemp(prefix="popcorn-exit-"))
    env = {**os.environ, "POPCORN_STORE": str(tmp / "store"), "POPCORN_CACHE_DIR": str(tmp / "cache"),
           "PYTHONPATH": str(ROOT)}
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    from bench.test_faults import current  # noqa: E402 - a row of today's code

    shard = tmp / "shard.jsonl"
    shard.write_text("".join(current(case_id=f"c{i}").to_json() + "\n" for i in range(20)))
    subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "merge", str(shard)], env=env, check=True,
                   capture_output=True)
    commands = {"merge": ["bench", "merge", str(shard)], "check": ["bench", "check"],
                "view": ["bench", "view", "--as-of", "0"]}
    table = {}
    for name, args in commands.items():
        table[f"popcorn {name}"] = collections.Counter(
            subprocess.run([sys.executable, "-m", "popcorn.cli", *args], env=env, capture_output=True).returncode
            for _ in range(runs))
    if "--bare" in sys.argv:
        for name, code in BARE.items():
            table[name] = collections.Counter(
                subprocess.run([sys.executable, "-c", code.format(uri=tmp / "store")], capture_output=True).returncode
                for _ in range(runs))
    print(f"{'command':<32} {'runs':>5}  exit codes")
    for name, counts in table.items():
        print(f"{name:<32} {sum(counts.values()):>5}  " + ", ".join(f"{c}: {n}" for c, n in sorted(counts.items())))


if __name__ == "__main__":
    main()
