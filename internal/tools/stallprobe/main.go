// Command stallprobe measures how late this machine wakes a sleeping
// thread, to tell a pause of the whole machine (the hypervisor taking the
// CPUs, the kernel stalling) from a pause of one process. It sleeps 1 ms
// at a time on a locked OS thread and, once a second, prints a CSV line:
//
//	unix_s,wakeups,max_late_ms,late_over_5ms,steal_ms
//
// max_late_ms is the most a sleep overran in that second; late_over_5ms how
// many overran by more than 5 ms; steal_ms the time /proc/stat says the
// hypervisor ran something else on this machine's CPUs meanwhile (summed
// over CPUs). Run it at a high priority (nice -n -10, as the bench does):
// then CPU contention from the processes measured delays it by well under a
// millisecond, and a long overrun means the machine itself stopped.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	nap := flag.Duration("sleep", time.Millisecond, "each sleep")
	flag.Parse()
	runtime.LockOSThread()
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "unix_s,wakeups,max_late_ms,late_over_5ms,steal_ms")
	out.Flush()
	steal := stealMS()
	sec := time.Now().Unix()
	var wakeups, over int
	var maxLate time.Duration
	for {
		start := time.Now()
		time.Sleep(*nap)
		now := time.Now()
		late := now.Sub(start) - *nap
		if now.Unix() != sec {
			s := stealMS()
			fmt.Fprintf(out, "%d,%d,%.2f,%d,%d\n", sec, wakeups, float64(maxLate)/float64(time.Millisecond), over, s-steal)
			if err := out.Flush(); err != nil {
				return // the reader is gone
			}
			steal, sec, wakeups, over, maxLate = s, now.Unix(), 0, 0, 0
		}
		wakeups++
		maxLate = max(maxLate, late)
		if late > 5*time.Millisecond {
			over++
		}
	}
}

// stealMS is the machine's steal time so far, in ms (all CPUs): the eighth
// value of /proc/stat's cpu line, in USER_HZ (100 a second on Linux); 0
// where there is no /proc/stat.
func stealMS() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	n, _ := strconv.ParseInt(f[8], 10, 64)
	return n * 10
}
