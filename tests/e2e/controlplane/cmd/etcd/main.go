// Command etcd runs a single-member embedded etcd server
// (go.etcd.io/etcd/server/v3/embed) on loopback for Muster's local control
// plane. It is deliberately small: a data dir, client and peer URLs, and the
// two settings kube-apiserver wants for tests (no fsync, watch progress
// notifications every 5s, as kubeadm configures).
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func parseURLs(name, s string) []url.URL {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		fmt.Fprintf(os.Stderr, "etcd: bad --%s %q: %v\n", name, s, err)
		os.Exit(2)
	}
	return []url.URL{*u}
}

func main() {
	var (
		name         = flag.String("name", "muster", "member name")
		dataDir      = flag.String("data-dir", "", "data directory (required)")
		clientURL    = flag.String("listen-client-urls", "http://127.0.0.1:23790", "client URL to listen on (also advertised)")
		peerURL      = flag.String("listen-peer-urls", "http://127.0.0.1:23800", "peer URL to listen on (also advertised)")
		metricsURL   = flag.String("listen-metrics-urls", "", "optional extra URL serving /metrics and /health")
		noFsync      = flag.Bool("unsafe-no-fsync", true, "disable fsync (fast, loses data on host crash; fine for tests)")
		progress     = flag.Duration("watch-progress-notify-interval", 5*time.Second, "periodic watch progress notification interval")
		logLevel     = flag.String("log-level", "warn", "debug, info, warn, error, panic or fatal")
		quotaBytes   = flag.Int64("quota-backend-bytes", 0, "backend size quota in bytes (0 = etcd default)")
		readyTimeout = flag.Duration("ready-timeout", 60*time.Second, "how long to wait for the server to become ready")
	)
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.LogLevel = *logLevel
	cfg.ListenClientUrls = parseURLs("listen-client-urls", *clientURL)
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = parseURLs("listen-peer-urls", *peerURL)
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	if *metricsURL != "" {
		cfg.ListenMetricsUrls = parseURLs("listen-metrics-urls", *metricsURL)
	}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = *noFsync
	cfg.WatchProgressNotifyInterval = *progress
	if *quotaBytes > 0 {
		cfg.QuotaBackendBytes = *quotaBytes
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: start failed: %v\n", err)
		os.Exit(1)
	}
	defer e.Close()

	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready, serving clients on %s\n", *clientURL)
	case <-time.After(*readyTimeout):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: server took too long to become ready")
		os.Exit(1)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: %v received, shutting down\n", s)
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: server error: %v\n", err)
		e.Close()
		os.Exit(1)
	}
}
