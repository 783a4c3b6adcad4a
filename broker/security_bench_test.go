package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/auth"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/storage"
)

func osfs() storage.FS { return storage.OSFS{} }

// benchTarget is a broker to measure: its address and the client options that log in.
type benchTarget struct {
	addr string
	opts []kgo.Opt
}

// securedTargets are kaas (SASL_PLAINTEXT, SCRAM-SHA-256, the simple authorizer with 100
// ACLs for other principals and one prefixed ALLOW for the one measured) and kfake with
// SASL and ACLs and the same ACLs.
func securedTargets(b *testing.B) map[string]benchTarget {
	const user, pass = "bench", "bench-password"
	login := []kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism())}
	c := brokertest.Config(b)
	c.Listeners = []config.Listener{{Name: "SASL_PLAINTEXT", Host: "127.0.0.1"}}
	c.Authorizer = "simple"
	seed := func(dir string) {
		cs, err := auth.NewCredentials(auth.CredentialsConfig{Dir: dir + "/__cluster", FS: osfs(), Log: brokertest.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		cr, _ := auth.NewCredential(auth.ScramSHA256, pass, auth.MinIterations)
		if _, err := cs.Alter([]auth.Change{{User: user, Mechanism: auth.ScramSHA256, Credential: &cr}}); err != nil {
			b.Fatal(err)
		}
		a, err := auth.NewAuthorizer(auth.AuthorizerConfig{Dir: dir + "/__cluster", FS: osfs(), Log: brokertest.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Create(benchACLs("User:" + user)); err != nil {
			b.Fatal(err)
		}
	}
	seed(c.DataDir)
	kb := brokertest.StartWith(b, c)

	var kacls []kfake.ACL
	for _, a := range benchACLs("User:" + user) {
		kacls = append(kacls, kfake.ACL{Principal: a.Principal, Resource: a.ResourceType, Name: a.ResourceName,
			Pattern: a.PatternType, Operation: a.Operation, Allow: a.Permission == auth.Allow, Host: a.Host})
	}
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "admin"), kfake.User("SCRAM-SHA-256", user, pass, kacls...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	return map[string]benchTarget{
		"kaas":  {addr: kb.ListenerAddr("SASL_PLAINTEXT"), opts: login},
		"kfake": {addr: kf.ListenAddrs()[0], opts: login},
	}
}

// benchACLs is 100 ACLs of other principals and the measured one's DESCRIBE on groups
// named bench-*.
func benchACLs(principal string) []auth.ACL {
	var out []auth.ACL
	for i := range 100 {
		out = append(out, auth.ACL{ResourceType: auth.Group, ResourceName: fmt.Sprintf("team-%d-", i), PatternType: auth.Prefixed,
			Principal: fmt.Sprintf("User:other-%d", i), Host: "*", Operation: auth.Read, Permission: auth.Allow})
	}
	return append(out, auth.ACL{ResourceType: auth.Group, ResourceName: "bench-", PatternType: auth.Prefixed,
		Principal: principal, Host: "*", Operation: auth.Describe, Permission: auth.Allow})
}

// BenchmarkSASLLogin measures connect + SCRAM-SHA-256 login + one request, kaas beside
// kfake (logins/s); report the ratio.
func BenchmarkSASLLogin(b *testing.B) {
	for _, name := range []string{"kaas", "kfake"} {
		b.Run(name, func(b *testing.B) {
			t := securedTargets(b)[name]
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.addr)}, t.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				if err := cl.Ping(ctx); err != nil {
					b.Fatal(err)
				}
				cl.Close()
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "logins/s")
		})
	}
}

// BenchmarkAuthorizedFindCoordinator measures FindCoordinator requests/s with the
// authorizer deciding each (32 in flight on one authenticated client), kaas beside kfake.
func BenchmarkAuthorizedFindCoordinator(b *testing.B) {
	for _, name := range []string{"kaas", "kfake"} {
		b.Run(name, func(b *testing.B) {
			t := securedTargets(b)[name]
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.addr)}, t.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			const depth = 32
			var wg sync.WaitGroup
			per := b.N/depth + 1
			b.ResetTimer()
			start := time.Now()
			for range depth {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						req := kmsg.NewPtrFindCoordinatorRequest()
						req.CoordinatorKey = "bench-g"
						resp, err := req.RequestWith(ctx, cl)
						if err != nil || resp.ErrorCode != 0 {
							b.Errorf("find coordinator: %v %+v", err, resp)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*depth)/time.Since(start).Seconds(), "req/s")
		})
	}
}
