// listwatch is the bench's reference for the agent's Kubernetes client (docs/bench.md, "The
// Kubernetes API against a real server"): client-go's shared informer on Nodes, as a controller
// written with client-go would watch them. It prints one JSON line when the informer has synced
// (the first list done) and one when stdin closes: seconds since start, its RSS then and at most,
// and the CPU seconds it used, with the Node events it handled.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func rssMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			fields := strings.Fields(line)
			kib, _ := strconv.ParseFloat(fields[1], 64)
			return kib / 1024
		}
	}
	return 0
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
	return float64(usage.Utime.Sec+usage.Stime.Sec) + float64(usage.Utime.Usec+usage.Stime.Usec)/1e6
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(config)
	start := time.Now()
	var peak atomic.Value
	peak.Store(rssMiB())
	go func() {
		for range time.Tick(25 * time.Millisecond) {
			if now := rssMiB(); now > peak.Load().(float64) {
				peak.Store(now)
			}
		}
	}()
	var events atomic.Int64
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	count := func(any) { events.Add(1) }
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    count,
		UpdateFunc: func(_, obj any) { count(obj) },
		DeleteFunc: count,
	})
	stop := make(chan struct{})
	factory.Start(stop)
	cache.WaitForCacheSync(stop, nodes.HasSynced)
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(map[string]any{
		"synced": time.Since(start).Seconds(), "nodes": len(nodes.GetStore().List()),
		"rssMiB": rssMiB(), "peakMiB": peak.Load(), "cpuSeconds": cpuSeconds(),
		"events": events.Load(),
	})
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = out.Encode(map[string]any{
		"seconds": time.Since(start).Seconds(), "rssMiB": rssMiB(), "peakMiB": peak.Load(),
		"cpuSeconds": cpuSeconds(), "events": events.Load(),
	})
	close(stop)
}
