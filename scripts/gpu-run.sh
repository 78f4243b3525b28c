# gpu-run.sh, sourced by gpu-check.sh and gpu-python.sh, defines run:
# run NAME COMMAND... runs the command with its output in $out/NAME.log and
# notes it, its exit status, its time and the log's last 25 lines in
# $out/summary.txt.
run() { # name, command...
	local name=$1; shift
	echo "### $name: $*" | tee -a "$out/summary.txt"
	local t0=$SECONDS
	"$@" >"$out/$name.log" 2>&1
	local rc=$?
	echo "### $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
	tail -n 25 "$out/$name.log" | sed 's/^/    /' >>"$out/summary.txt"
}
