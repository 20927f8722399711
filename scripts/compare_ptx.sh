#!/usr/bin/env bash
# Shows that a refactor changes no shipped kernel. Builds the PTX of each target for sm_80 and sm_90a twice,
# at BASE_REV (checked out into a temporary git worktree) and in the working tree, splits every PTX file into
# its kernels (.entry) and non-inlined device functions (.func), and compares them one by one by name.
#   bash scripts/compare_ptx.sh HEAD                  working tree vs HEAD: train_gpt2.cu with src/attention_*.cu (what ships)
#   bash scripts/compare_ptx.sh HEAD~3 --dev          also the dev/cuda attention harnesses
#   bash scripts/compare_ptx.sh HEAD dev/cuda/attention_backward.cu   just the targets given
#   bash scripts/compare_ptx.sh HEAD a.cu+b.cu         a group: the members' kernels compared as one target (members
#                                                      missing from a tree are skipped), so kernels may move between files
#   flags: -q prints only kernels that are not identical; -j N runs N nvcc at once (default: nproc);
#          --keep keeps the PTX and the split kernels (they are kept anyway when something differs)
# One line per kernel with its status on each arch: identical / differs / only in base / only in new,
# then the module-level declarations, then a summary line. Exits 0 only if every kernel of the base is
# present in the working tree and identical (kernels only in new are fine), 1 if not, 2 if a build fails.
#
# The flags are the Makefile's (-O3 --use_fast_math -std=c++17 -DNDEBUG -lineinfo -I. -Isrc) with a fixed
# GIT_COMMIT. A kernel may move between headers of one target and still compare: nvcc runs from each tree's
# root on relative paths (so no __FILE__ holds the tree's path), what -lineinfo adds (.loc, .file, the .debug
# sections) is stripped, and kernels are matched by their (mangled) names, not by their position.
# PTX virtual registers are numbered the same for the same code, so after normalising the PTX as below an
# exact compare is the test.
set -u
cd "$(dirname "$0")/.."
export LC_ALL=C   # one byte order for sort and comm

usage() { echo "usage: bash scripts/compare_ptx.sh BASE_REV [--dev] [-q] [-j N] [--keep] [TARGET.cu ...]"; exit 2; }
[ $# -ge 1 ] || usage
BASE_REV=$1; shift
TARGETS=(); DEV=0; QUIET=0; KEEP=0; JOBS=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
    case $1 in
    --dev)  DEV=1 ;;
    -q)     QUIET=1 ;;
    -j)     [ $# -ge 2 ] || usage; JOBS=$2; shift ;;
    --keep) KEEP=1 ;;
    -*)     usage ;;
    *)      TARGETS+=("$1") ;;
    esac
    shift
done
SHIPPED=train_gpt2.cu+src/attention_forward.cu+src/attention_backward.cu+src/attention_backward_general.cu
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=($SHIPPED)
[ $DEV = 1 ] && TARGETS+=(dev/cuda/attention_forward.cu dev/cuda/attention_backward.cu dev/cuda/attention_general.cu+src/attention_forward.cu+src/attention_backward.cu+src/attention_backward_general.cu)
ARCHS=(sm_80 sm_90a)
NVCC=${NVCC:-nvcc}
FLAGS=(-DGIT_COMMIT=\"x\" -O3 --use_fast_math -std=c++17 -DNDEBUG -lineinfo -I. -Isrc)
BASE_SHA=$(git rev-parse --verify --quiet "$BASE_REV^{commit}") || { echo "not a revision: $BASE_REV"; exit 2; }

W=$(mktemp -d /tmp/compare_ptx.XXXXXX)
cleanup() {
    git worktree remove --force "$W/tree" 2>/dev/null
    if [ $KEEP = 1 ]; then echo "PTX and split kernels kept in $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
git worktree add --detach --quiet "$W/tree" "$BASE_SHA" || exit 2
NEW_TREE=$PWD
t0=$SECONDS

# ----------------------------------------------------------------------------
# build: every (side, arch, target) is one nvcc -ptx, run JOBS at a time, the long sm_90a ones first

ptx_name() { echo "$1" | tr '/+' '__' | sed 's/\.cu//g'; }   # dev/cuda/attention_forward.cu -> dev_cuda_attention_forward
build_one() {   # side arch target: a .cu, or a group a.cu+b.cu whose members' PTX is compared as one (members missing
                # from a tree are skipped: the group follows kernels that move between files)
    local tree=$NEW_TREE; [ "$1" = base ] && tree=$W/tree
    local out=$W/$1/ptx_$2_$(ptx_name "$3") found=0 m
    : > "$out.ptx"
    for m in ${3//+/ }; do
        [ -f "$tree/$m" ] || continue
        found=1
        (cd "$tree" && "$NVCC" "${FLAGS[@]}" -arch="$2" -ptx "$m" -o "$out.$(ptx_name "$m").part") >> "$out.log" 2>&1 || { touch "$out.failed"; return; }
        cat "$out.$(ptx_name "$m").part" >> "$out.ptx"
    done
    [ $found = 1 ] || { rm -f "$out.ptx"; touch "$out.missing"; }
}
mkdir -p "$W/base" "$W/new"
for arch in sm_90a sm_80; do
    for t in "${TARGETS[@]}"; do
        for side in base new; do
            while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
            build_one $side $arch "$t" &
        done
    done
done
wait
for f in "$W"/{base,new}/*.failed; do
    [ -e "$f" ] || continue
    echo "nvcc failed: ${f%.failed}.log"; grep -E "error" "${f%.failed}.log" | head -10
    KEEP=1; exit 2
done
echo "PTX built in $((SECONDS - t0)) s ($JOBS at a time)"

# ----------------------------------------------------------------------------
# split + normalise: one file per .entry/.func in DIR/k/, listed in DIR/index as "name file"; everything else
# at the top level (globals, shared and constant declarations, prototypes) goes sorted into DIR/globals.
# What is stripped or renamed, and why:
#   - comments: the header's compiler version/build lines, "// .globl", "// begin inline asm", "has been demoted"
#   - .loc, .file and the .section .debug_* blocks: line numbers and absolute paths move with any edit
#   - $L__BB<f>_<n> labels and __local_depot<f>: <f> is the function's position in the module, so a kernel
#     moved to another header (or with a new kernel before it) gets other numbers; <n> stays
#   - $str$<n> (device printf strings) are numbered across the module for the same reason; their contents
#     still compare in the globals
#   - top-level declarations are compared as a set: their order follows the order of first use

split_ptx() {   # ptx dir
    mkdir -p "$2/k"
    awk -v dir="$2" '
    function braces(s,   o, c) { o = gsub(/\{/, "{", s); c = gsub(/\}/, "}", s); return o - c }
    function fname(s) {   # the name after .entry/.func, past an optional (return value)
        sub(/^.*\.(entry|func)[ \t]*/, "", s)
        if (s ~ /^\(/) sub(/^\([^)]*\)[ \t]*/, "", s)
        match(s, /^[A-Za-z0-9_$.]+/)
        return substr(s, 1, RLENGTH)
    }
    BEGIN { depth = 0; mode = "top"; nf = 0 }
    {
        line = $0
        if (mode == "debug") { depth += braces(line); if (depth == 0 && line ~ /\}/) mode = "top"; next }
        if (line ~ /^[ \t]*\/\//) next
        sub(/[ \t]*\/\/.*$/, "", line)
        if (line ~ /^[ \t]*\.(loc|file)[ \t]/) next
        if (depth == 0 && line ~ /^[ \t]*\.section[ \t]/) { depth = braces(line); if (depth > 0 || line !~ /\}/) mode = "debug"; next }
        gsub(/\$L__BB[0-9]+_/, "$L__BB_", line)
        gsub(/__local_depot[0-9]+/, "__local_depot", line)
        gsub(/\$str(\$[0-9]+)?/, "$str", line)
        if (line ~ /^[ \t]*$/) next
        if (mode == "top" && depth == 0 && line ~ /(^|[ \t])\.(entry|func)([ \t(]|$)/) { mode = "head"; name = fname(line); buf = "" }
        if (mode == "head") {
            buf = buf line "\n"
            d = braces(line)
            if (d > 0) { mode = "body"; depth = d; next }
            if (line ~ /;[ \t]*$/) { gsub(/\n/, " ", buf); print buf > (dir "/globals.unsorted"); mode = "top" }
            next
        }
        if (mode == "body") {
            buf = buf line "\n"; depth += braces(line)
            if (depth == 0) {
                file = sprintf("k/%05d", ++nf); printf "%s", buf > (dir "/" file); close(dir "/" file)
                print name, file > (dir "/index"); mode = "top"
            }
            next
        }
        print line > (dir "/globals.unsorted")
    }' "$1"
    touch "$2/index" "$2/globals.unsorted"
    sort "$2/globals.unsorted" > "$2/globals"
}
for side in base new; do
    for arch in "${ARCHS[@]}"; do
        for t in "${TARGETS[@]}"; do
            p=$W/$side/ptx_${arch}_$(ptx_name "$t")
            [ -f "$p.ptx" ] && split_ptx "$p.ptx" "$p" &
        done
    done
done
wait

# ----------------------------------------------------------------------------
# compare: one line per target and kernel, a status per arch

same=0; differ=0; only_base=0; only_new=0; mismatches=0
demangle() { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }
printf "%-14s %-14s %s\n" "${ARCHS[@]}" "kernel"
for t in "${TARGETS[@]}"; do
    tn=$(ptx_name "$t")
    if [ -e "$W/base/ptx_sm_80_$tn.missing" ] || [ -e "$W/new/ptx_sm_80_$tn.missing" ]; then
        [ -e "$W/base/ptx_sm_80_$tn.missing" ] && echo "$t: not in $BASE_REV (all its kernels are new)" || { echo "$t: not in the working tree"; mismatches=$((mismatches + 1)); }
        continue
    fi
    # kernels in order of their demangled names: "demangled<TAB>mangled"
    names=$(for arch in "${ARCHS[@]}"; do cut -d' ' -f1 "$W/base/ptx_${arch}_$tn/index" "$W/new/ptx_${arch}_$tn/index"; done | sort -u)
    while IFS=$'\t' read -r pretty name; do
        [ -n "$name" ] || continue
        row=()
        for arch in "${ARCHS[@]}"; do
            b=$W/base/ptx_${arch}_$tn; n=$W/new/ptx_${arch}_$tn
            bf=$(awk -v k="$name" '$1 == k { print $2; exit }' "$b/index"); nf=$(awk -v k="$name" '$1 == k { print $2; exit }' "$n/index")
            if [ -n "$bf" ] && [ -n "$nf" ]; then
                if cmp -s "$b/$bf" "$n/$nf"; then s=identical; same=$((same + 1))
                else s=differs; differ=$((differ + 1)); fi
            elif [ -n "$bf" ]; then s="only in base"; only_base=$((only_base + 1))
            else s="only in new"; only_new=$((only_new + 1)); fi
            row+=("$s")
        done
        [ $QUIET = 1 ] && [ "${row[*]}" = "identical identical" ] && continue
        printf "%-14s %-14s %s  %s\n" "${row[@]}" "$t" "$pretty"
    done < <(paste <(echo "$names" | demangle | sed 's/^void //') <(echo "$names") | sort -t$'\t' -k1,1)
    for arch in "${ARCHS[@]}"; do
        b=$W/base/ptx_${arch}_$tn/globals; n=$W/new/ptx_${arch}_$tn/globals
        gone=$(comm -23 "$b" "$n" | wc -l); added=$(comm -13 "$b" "$n" | wc -l)
        if [ "$gone" -gt 0 ]; then mismatches=$((mismatches + 1))
            echo "module-level declarations of $t $arch: $gone lines of the base changed or gone, $added new:"; comm -3 "$b" "$n" | sed 's/^\t/  new:  /; t; s/^/  base: /' | head -10 | cut -c1-160
        elif [ "$added" -gt 0 ]; then echo "module-level declarations of $t $arch: all of the base kept, $added new"; fi
    done
done

total=$((same + differ + only_base))
other=""; [ $mismatches -gt 0 ] && other="; $mismatches other mismatches (module-level declarations, targets)"
echo "$same of $total base kernels identical (over ${ARCHS[*]}), $differ differ, $only_base only in base, $only_new only in new$other; $((SECONDS - t0)) s"
if [ $differ -gt 0 ] || [ $only_base -gt 0 ] || [ $mismatches -gt 0 ]; then
    echo "normalised kernels: $W/{base,new}/ptx_<arch>_<target>/ (index maps names to files)"; KEEP=1; exit 1
fi
exit 0
