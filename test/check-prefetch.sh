#!/usr/bin/env bash
# test/check-prefetch.sh: check that the CPU prefetches written in src/ are
# in the build.
#
# A prefetch that the compiler deletes costs nothing visible: no warning,
# no wrong result, only the cache misses it was written to hide.  GCC
# deletes a call of a function that only runs __builtin_prefetch, defined
# in the same file, as dead code (src/base/cpu_prefetch.h says why).  So
# the script fails, naming each, when
#
#   - a file of src/ other than base/cpu_prefetch.h calls __builtin_prefetch
#     (cpu_prefetch and cpu_prefetch_lines are the ones that stay);
#   - a function that calls cpu_prefetch or cpu_prefetch_lines is in its
#     object file without a prefetch instruction;
#   - an object file whose source prefetches has no prefetch instruction.
#
# A function missing from its object file was inlined into its callers, or
# deleted: only the first rule keeps the second from happening, since no
# build tells the two apart.
#
# Usage: test/check-prefetch.sh [source root, default: the repository's src]
# after a build (it reads the .o files beside the .c files).
# Exit status: 0 when every prefetch is in the build, 1 when one is not, 2
# when there is nothing built to read.  Needs objdump, which the compiler's
# binutils bring.
set -euo pipefail

src=${1:-$(cd "$(dirname "$0")/.." && pwd)/src}
status=0
fail() { echo "check-prefetch: $*" >&2; status=1; }

while IFS= read -r file; do
	fail "$file calls __builtin_prefetch: use cpu_prefetch (base/cpu_prefetch.h), which the compiler cannot delete"
done < <(grep -rl --include='*.c' --include='*.h' '__builtin_prefetch' "$src" | grep -v '/base/cpu_prefetch\.h$' || true)

for c in $(grep -rl --include='*.c' -E '\bcpu_prefetch(_lines)?\(' "$src"); do
	o=${c%.c}.o
	if [ ! -f "$o" ]; then
		echo "check-prefetch: $o is not built; run make first" >&2
		exit 2
	fi
	# The functions whose bodies prefetch: PostgreSQL's layout puts a
	# definition's name at the start of a line and its braces in column 1.
	prefetching=$(awk '
		/^[A-Za-z_][A-Za-z0-9_]*\(/ { name = substr($0, 1, index($0, "(") - 1) }
		/^\{/ { body = 1; uses = 0 }
		body && /(^|[^A-Za-z0-9_])cpu_prefetch(_lines)?\(/ { uses = 1 }
		/^\}/ { if (body && uses) print name; body = 0 }
	' "$c")
	# Prefetch instructions per function of the object file (x86: prefetch*,
	# arm64: prfm).
	counts=$(objdump -d --no-show-raw-insn "$o" | awk '
		/^[0-9a-f]+ <[^>]+>:$/ { f = substr($2, 2, length($2) - 3); n[f] += 0 }
		$2 ~ /^(prefetch|prfm)/ { n[f]++; total++ }
		END { for (f in n) print f, n[f]; print "<total>", total + 0 }
	')
	[ "$(awk '$1 == "<total>" { print $2 }' <<<"$counts")" -gt 0 ] ||
		fail "$o has no prefetch instruction, though ${c#"$src"/} prefetches"
	for fn in $prefetching; do
		n=$(awk -v f="$fn" '$1 == f { print $2 }' <<<"$counts")
		# absent: inlined (or deleted, which the first rule prevents)
		[ -z "$n" ] || [ "$n" -gt 0 ] ||
			fail "$fn (${c#"$src"/}) prefetches in its source and has no prefetch instruction in $o"
	done
done
exit $status
