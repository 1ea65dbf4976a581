#!/usr/bin/env bash
# Mutation testing with mutmut: mutate MODULEs and run only their tests against each mutant.
#
#   scripts/mutation.sh [--only PATTERN]... MODULE... [-- TEST_FILE...]
#
# MODULE: a file under anb/ (e.g. anb/outputs.py). Its tests come from the table below unless
# TEST_FILEs follow "--". PATTERN selects mutants by mutmut's names, e.g. 'anb.io.x_atomic*'
# (x_ marks a function, xǁClassǁ a method). Runs in a copy of the checkout under
# ${MUTATION_DIR:-a new temporary folder} (the checkout is never mutated), the tests without
# pytest-xdist and without @slow tests; prints the score and every surviving mutant
# (inspect one with: cd DIR && mutmut show NAME). Needs mutmut (requirements.txt, dev extra).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
only=() modules=() tests=()
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only+=("$2"); shift 2 ;;
    --) shift; tests=("$@"); break ;;
    -*) echo "error: unknown option $1; allowed: --only PATTERN, --" >&2; exit 2 ;;
    *) modules+=("$1"); shift ;;
  esac
done
[ ${#modules[@]} -gt 0 ] || { sed -n 2,12p "$0" >&2; exit 2; }

tests_of() {  # the tests that exercise a module
  case "$1" in
    anb/collect_throughput/board/server.py|anb/collect_throughput/targets/resident.py)
      echo tests/test_resident_target.py ;;
    anb/outputs.py) echo tests/test_outputs.py ;;
    anb/io.py) echo tests/test_io.py tests/test_outputs.py ;;
    anb/plugins.py|anb/searchspace/registry.py|anb/collect_throughput/registries.py)
      echo tests/test_plugins_clash.py tests/test_plugins_devices.py ;;
    *) return 1 ;;
  esac
}
for module in "${modules[@]}"; do
  [ -f "$repo/$module" ] || { echo "error: module $module does not exist" >&2; exit 2; }
  if [ ${#tests[@]} -eq 0 ] || [ -n "${auto:-}" ]; then
    auto=1
    found=$(tests_of "$module") || { echo "error: no tests known for $module; name them:" \
      "scripts/mutation.sh $module -- tests/test_x.py" >&2; exit 2; }
    read -ra more <<< "$found"
    tests+=("${more[@]}")
  fi
done
mapfile -t tests < <(printf '%s\n' "${tests[@]}" | sort -u)

work=${MUTATION_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/anb-mutation.XXXXXX")}
mkdir -p "$work"
(cd "$repo" && git ls-files -co --exclude-standard -z | grep -zv '^\.venv$' \
  | xargs -0 tar -cf - --ignore-failed-read) | tar -xf - -C "$work"
{
  echo "[mutmut]"
  echo "source_paths = anb"
  echo "only_mutate ="; printf '    %s\n' "${modules[@]}"
  echo "also_copy ="; printf '    %s\n' tests configs pyproject.toml
  echo "pytest_add_cli_args_test_selection ="; printf '    %s\n' "${tests[@]}"
  # the board server's Python 3.7 check reads the source, which mutmut rewrites
  echo "pytest_add_cli_args ="
  printf '    %s\n' -p no:xdist -p no:cacheprovider -m "not slow" -k "not self_contained"
} > "$work/setup.cfg"

cd "$work"
export PYTHONPATH="$work" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 WANDB_MODE=offline
mutmut=$(dirname "$(command -v python)")/mutmut
[ -x "$mutmut" ] || mutmut=mutmut
echo "mutating ${modules[*]} against ${tests[*]} in $work"
"$mutmut" run --max-children "${MUTATION_JOBS:-2}" "${only[@]}" || true
"$mutmut" results --all true > results.txt
python - <<'PY'
import collections, re
status = collections.Counter()
survivors = []
for line in open("results.txt"):
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m and m.group(2) != "not checked":  # outside --only
        status[m.group(2)] += 1
        if m.group(2) in ("survived", "no tests"):
            survivors.append(line.strip())
killed = status["killed"] + status["timeout"]
total = sum(status.values())
print("mutants:", dict(status))
print(f"score: {killed}/{total} killed ({100 * killed / max(total, 1):.1f}%)")
print("\n".join(survivors))
PY
