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
# A stalled build counts one per operation, and most of its sleeps run
# out into a stall (65-98% in the builds checked).  A healthy run counts
# 0-1, and on a crowded machine (8 ranks, one busy process and other work
# on 2 cores) up to 7 in thousands of sleeps that ran out: work landing
# in the instant a sleep ended.  So a run may count STALL_SLACK, plus one
# per STALL_PER sleeps that ran out.
STALL_SLACK=${STALL_SLACK:-3}
STALL_PER=${STALL_PER:-50}

# log_stalls LOG: the sum over every rank's report
log_stalls() {
    { grep -Eo '(stalls|late_wakeups|waits_past_inbound)=[0-9]+' "$1" || true; } | awk -F= '{s += $2} END {print s + 0}'
}

# stall_allowed LOG: how many stalls the run may count
stall_allowed() {
    local ran_out
    ran_out=$({ grep -Eo 'sleep_timeouts=[0-9]+' "$1" || true; } | awk -F= '{s += $2} END {print s + 0}')
    echo $((STALL_SLACK + ran_out / STALL_PER))
}

# stall_problem LOG NP: why the run's counters show a stall, or nothing
stall_problem() {
    local log=$1 np=$2 reports stalls allowed
    reports=$(grep -Ec 'btl doorbell: rank [0-9]+ counters:.* stalls=[0-9]+' "$log" || true)
    stalls=$(log_stalls "$log")
    allowed=$(stall_allowed "$log")
    if [[ $reports != "$np" ]]; then
        echo "$reports of $np ranks printed stall counters"
    elif ((stalls > allowed)); then
        echo "$stalls stalls counted (at most $allowed): a sleep or a wait held up work"
    fi
}
