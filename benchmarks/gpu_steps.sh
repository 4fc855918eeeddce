# benchmarks/gpu_steps.sh: the step runner that benchmarks/gpu_check.sh and benchmarks/gpu_headline.sh source.
#
# The sourcing script sets CHECK (its name, for messages and the report), SCRIPT (its path, whose header
# comment is its --help), ROOT, STEPS (in order), LIMIT (step -> seconds), BUDGET (the default budget) and
# OUT_DIR (the default results folder, or empty for default_out_dir CARD, a function it then defines), then:
#   steps_parse_args "$@"   --out DIR --budget SECONDS --python PY --wheels DIR --skip STEP,... --dry-run --help
#   steps_start             the machine's facts (benchmarks/gpu_facts.py), the results folder, the log, and in a
#                           dry run the check that the limits of the steps not skipped, plus 10%, fit the budget
#   install_step            pip install --no-deps --no-build-isolation --no-index -e . with the carried wheels
#                           (--wheels) whose module PY cannot import yet (with pip's --dry-run in a dry run)
#   run_step NAME CMD...    CMD under `timeout` with NAME's limit, cut to what the budget has left
#   script_step NAME FILE ARGS...  run_step NAME PY FILE ARGS..., or "missing" (reported, not fatal) without FILE
#   steps_finish            the outcome line and the exit status
# Step statuses: passed, failed, timeout (ran past its own limit), incomplete (the budget left it no time or cut
# it short), skipped (--skip, or not applicable), missing (its script is not in this checkout), planned (a dry
# run). The report, $OUT_DIR/$CHECK.json, is rewritten after every step (atomically): the machine (GPU, torch,
# Triton, CUDA, the source's commit), each step's status, exit code, seconds, limit, command and output tail,
# pytest counts of a step given --junitxml=$WORK/NAME.xml, and the lists of failed, incomplete and missing steps.
# Exit status: 0 when every step ran and passed, 1 when one failed or timed out, 3 when none failed but some
# were incomplete or missing, 2 for bad arguments or (--dry-run) limits that do not fit the budget.

MIN_STEP_S=20  # a step gets at least this much of the budget, or is incomplete

steps_usage() { sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d' | sed 's/^# \{0,1\}//'; }
steps_fail_args() { echo "$CHECK: $1 (see --help)" >&2; exit 2; }

steps_parse_args() {  # sets BUDGET OUT_DIR PY WHEELS SKIP DRY_RUN from the arguments, checked
    PY=python3
    WHEELS=$ROOT/benchmarks/.gpu-wheels
    SKIP=""
    DRY_RUN=0
    while (($#)); do
        case $1 in
            --out) (($# >= 2)) || steps_fail_args "--out needs a directory"; OUT_DIR=$2; shift 2 ;;
            --budget) (($# >= 2)) || steps_fail_args "--budget needs seconds"; BUDGET=$2; shift 2 ;;
            --python) (($# >= 2)) || steps_fail_args "--python needs an interpreter"; PY=$2; shift 2 ;;
            --wheels) (($# >= 2)) || steps_fail_args "--wheels needs a directory"; WHEELS=$2; shift 2 ;;
            --skip) (($# >= 2)) || steps_fail_args "--skip needs step names"; SKIP=$2; shift 2 ;;
            --dry-run) DRY_RUN=1; shift ;;
            -h | --help) steps_usage; exit 0 ;;
            *) steps_fail_args "unknown argument '$1'" ;;
        esac
    done
    [[ $BUDGET =~ ^[1-9][0-9]*$ ]] || steps_fail_args "--budget must be a whole number of seconds > 0, got '$BUDGET'"
    command -v "$PY" > /dev/null || steps_fail_args "--python: no interpreter '$PY'"
    [[ $PY != */* ]] || PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # steps run from the repository root
    [[ ! -d $WHEELS ]] || WHEELS=$(cd "$WHEELS" && pwd)
    local step
    for step in ${SKIP//,/ }; do
        [[ " ${STEPS[*]} " == *" $step "* ]] || steps_fail_args "--skip: unknown step '$step' (steps: ${STEPS[*]})"
    done
    "$PY" -c "import torch" 2> /dev/null \
        || steps_fail_args "--python: '$PY' cannot import torch (give the interpreter of your CUDA torch)"
}

steps_start() {  # WORK, the machine's facts, OUT_DIR and LOG; a dry run's budget check
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    "$PY" "$ROOT/benchmarks/gpu_facts.py" "$WORK/machine.json"
    if [[ -z $OUT_DIR ]]; then
        OUT_DIR=$(default_out_dir "$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['gpu'] or '')" \
            "$WORK/machine.json")")
    fi
    mkdir -p "$OUT_DIR"
    OUT_DIR=$(cd "$OUT_DIR" && pwd)
    LOG=$OUT_DIR/$CHECK.log
    : > "$LOG"
    : > "$WORK/steps.tsv"
    DEADLINE=$(($(date +%s) + BUDGET))
    if ((DRY_RUN)); then  # the limits of the steps that would run, plus a 10% margin, must fit the budget
        local planned=0 step
        for step in "${STEPS[@]}"; do [[ ",$SKIP," == *",$step,"* ]] || planned=$((planned + LIMIT[$step])); done
        if ((planned + planned / 10 > BUDGET)); then
            echo "$CHECK: the steps' limits add up to ${planned}s, over --budget ${BUDGET}s with a 10% margin" >&2
            exit 2
        fi
        echo "plan: the steps' limits add up to ${planned}s of the ${BUDGET}s budget"
    fi
    cd "$ROOT"
    export PYTHONUNBUFFERED=1
}

summarize() {  # write $CHECK.json from the steps so far (atomically: a killed run leaves the last one)
    "$PY" - "$WORK" "$OUT_DIR/$CHECK.json" "$DRY_RUN" "$BUDGET" "$CHECK" << 'EOF'
import json, os, sys, xml.etree.ElementTree as ET
work, dest, dry_run, budget, check = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5]
steps = []
for line in open(os.path.join(work, "steps.tsv")):
    name, status, rc, seconds, limit, command = line.rstrip("\n").split("\t")
    step = {"name": name, "status": status, "rc": int(rc) if rc else None, "seconds": int(seconds),
            "limit_s": int(limit), "command": command}
    out = os.path.join(work, name + ".out")
    if os.path.exists(out):
        step["output_tail"] = open(out, errors="replace").read().splitlines()[-40:]
    junit = os.path.join(work, name + ".xml")
    if os.path.exists(junit):
        suites = ET.parse(junit).getroot()
        suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
        step["tests"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        step["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                          if c.find("failure") is not None or c.find("error") is not None]
    cases = os.path.join(os.path.dirname(dest), "gpu_smoke.jsonl")
    if name == "cases" and os.path.exists(cases):
        step["cases"] = [json.loads(line) for line in open(cases) if line.strip()]
    steps.append(step)
machine = os.path.join(work, "machine.json")
report = {"check": check, "dry_run": dry_run, "budget_s": budget,
          "machine": json.load(open(machine)) if os.path.exists(machine) else None, "steps": steps,
          "passed": all(s["status"] in ("passed", "planned", "skipped") for s in steps),
          "incomplete": [s["name"] for s in steps if s["status"] == "incomplete"],
          "missing": [s["name"] for s in steps if s["status"] == "missing"],
          "failed": [s["name"] for s in steps if s["status"] in ("failed", "timeout")]}
with open(dest + ".tmp", "w") as f:
    json.dump(report, f, indent=2)
os.replace(dest + ".tmp", dest)
EOF
}

record() {  # NAME STATUS RC SECONDS LIMIT COMMAND
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$WORK/steps.tsv"
    summarize
}

run_step() {  # NAME COMMAND...: run COMMAND under `timeout` with NAME's limit (or only plan it in a dry run)
    local name=$1 limit=${LIMIT[$1]} rc=0 began status left cut=0
    shift
    left=$((DEADLINE - $(date +%s)))
    if [[ ",$SKIP," == *",$name,"* ]]; then
        record "$name" skipped "" 0 "$limit" "$*"
        return
    fi
    if ((DRY_RUN)) && [[ $name != install ]]; then
        echo "plan: $name (at most ${limit}s): $*"
        record "$name" planned "" 0 "$limit" "$*"
        return
    fi
    if ((left < MIN_STEP_S)); then
        echo "== $name: incomplete, not run: ${left}s of the budget left" | tee -a "$LOG"
        record "$name" incomplete "" 0 "$limit" "$*"
        return
    fi
    ((limit <= left)) || { limit=$left; cut=1; }
    echo "== $name (at most ${limit}s): $*" | tee -a "$LOG"
    began=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" > "$WORK/$name.out" 2>&1 || rc=$?
    cat "$WORK/$name.out" >> "$LOG"
    case $rc in
        0) status=passed ;;
        124 | 137) ((cut)) && status=incomplete || status=timeout ;;
        *) status=failed ;;
    esac
    echo "== $name: $status (exit $rc, $(($(date +%s) - began))s)" | tee -a "$LOG"
    record "$name" "$status" "$rc" "$(($(date +%s) - began))" "$limit" "$*"
}

script_step() {  # NAME FILE ARGS...: run_step NAME PY FILE ARGS..., or the step "missing" when FILE is not here
    local name=$1 file=$2
    shift 2
    if [[ ! -f $ROOT/$file ]] && [[ ",$SKIP," != *",$name,"* ]]; then
        echo "== $name: missing, $file is not in this checkout" | tee -a "$LOG"
        record "$name" missing "" 0 "${LIMIT[$name]}" "$PY $file $*"
        return
    fi
    run_step "$name" "$PY" "$file" "$@"
}

# "" when PY should install the wheel $1, else why not: its module is importable already, or PY's
# Python cannot take its tags (the GPU peer's wheels are built for one CPython)
WHEEL_VERDICT='import importlib.util, sys
from pip._vendor.packaging.tags import sys_tags
from pip._vendor.packaging.utils import parse_wheel_filename
name, _, _, tags = parse_wheel_filename(sys.argv[1].rsplit("/", 1)[-1])
module = name.replace("-", "_")
if importlib.util.find_spec(module) is not None:
    print(f"{module} is already importable")
elif not tags & set(sys_tags()):
    built = ", ".join(sorted({t.interpreter for t in tags}))
    print(f"this Python cannot install it (built for {built})")'

install_step() {  # the install step: the project, and the carried wheels PY can take and cannot import yet
    local wheel verdict
    local install=("$PY" -m pip install --no-deps --no-build-isolation --no-index)
    ((DRY_RUN)) && install+=(--dry-run)
    install+=(-e "$ROOT")
    for wheel in "$WHEELS"/*.whl; do
        [[ -e $wheel ]] || break
        verdict=$("$PY" -c "$WHEEL_VERDICT" "$wheel")
        if [[ -z $verdict ]]; then
            install+=("$wheel")
        else
            echo "install: $(basename "$wheel") is left out: $verdict" | tee -a "$LOG"
        fi
    done
    run_step install "${install[@]}"
}

steps_finish() {  # the outcome line; exit 0 passed, 1 failed, 3 incomplete or missing
    local outcome
    outcome=$("$PY" -c "import json, sys; r = json.load(open(sys.argv[1]))
print('failed' if r['failed'] else 'incomplete' if r['incomplete'] or r['missing'] else 'passed')" \
        "$OUT_DIR/$CHECK.json")
    case $outcome in
        passed) echo "$CHECK: passed; results in $OUT_DIR" ;;
        incomplete)
            echo "$CHECK: INCOMPLETE, nothing failed but the budget ran out or scripts are missing" \
                "(see $OUT_DIR/$CHECK.json)"
            exit 3
            ;;
        *) echo "$CHECK: FAILED (see $OUT_DIR/$CHECK.json)"; exit 1 ;;
    esac
}
