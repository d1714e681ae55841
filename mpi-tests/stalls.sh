# mpi-tests/stalls.sh -- sourced by the MPI suites: the stalls a doorbell
# run counted, read from the counters every rank prints at finalize with
# --mca btl_doorbell_verbose 1.
#
# A stall is counted where it happens, not timed:
#   stalls              the component slept, the sleep ran out unrung, and
#                       work was there at once (a pass with events, or the
#                       blocking call over): work that no bell announced
#                       waited out the whole sleep (1-16 ms);
#   late_wakeups        the core's sleep ran out unrung with a message or
#                       room already waiting: a lost ring;
#   waits_past_inbound  a wait for room gave up at its limit while this
#                       rank had something to receive.
# Healthy runs count 0 on a quiet or a loaded machine; a stalled build
# counts one per operation (hundreds to thousands per run).  The slack
# covers a message landing in the instant a sleep ends.
STALL_SLACK=${STALL_SLACK:-3}

# log_stalls LOG: the sum over every rank's report
log_stalls() {
    { grep -Eo '(stalls|late_wakeups|waits_past_inbound)=[0-9]+' "$1" || true; } | awk -F= '{s += $2} END {print s + 0}'
}

# stall_problem LOG NP: why the run's counters show a stall, or nothing
stall_problem() {
    local log=$1 np=$2 reports stalls
    reports=$(grep -Ec 'btl doorbell: rank [0-9]+ counters:.* stalls=[0-9]+' "$log" || true)
    stalls=$(log_stalls "$log")
    if [[ $reports != "$np" ]]; then
        echo "$reports of $np ranks printed stall counters"
    elif ((stalls > STALL_SLACK)); then
        echo "$stalls stalls counted (slack $STALL_SLACK): a sleep or a wait held up work"
    fi
}
