package config

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultsAreTheEmbeddedBroker(t *testing.T) {
	c, err := Parse(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listeners[0].String() != "PLAINTEXT://127.0.0.1:9092" || c.DataDir != "./data" || c.NodeID != 0 ||
		c.HTTPListen != "127.0.0.1:9644" || c.MaxRequestBytes != 104857600 ||
		c.ConnectionsMaxIdle != 10*time.Minute || c.GroupInitialRebalanceDelay != 3*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestFlagBeatsEnvBeatsDefault(t *testing.T) {
	e := env(map[string]string{
		"KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS": "250",
		"KAAS_NODE_ID":                          "3",
		"KAAS_LISTENERS":                        "PLAINTEXT://127.0.0.1:1,internal://0.0.0.0:2",
		"KAAS_LISTENER_SECURITY_PROTOCOL_MAP":   "PLAINTEXT:PLAINTEXT,internal:PLAINTEXT",
	})
	c, err := Parse([]string{"--node.id=5", "--advertised.listeners=INTERNAL://kaas-5.kaas:2"}, e, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != 5 {
		t.Fatalf("node.id %d: the flag must win over the environment", c.NodeID)
	}
	if c.GroupInitialRebalanceDelay != 250*time.Millisecond {
		t.Fatalf("delay %v from the environment", c.GroupInitialRebalanceDelay)
	}
	if len(c.Listeners) != 2 || c.Listeners[1].Name != "INTERNAL" || c.Listeners[1].Port != 2 {
		t.Fatalf("listeners %+v", c.Listeners)
	}
	if adv := c.Advertised("INTERNAL", 2); adv.Host != "kaas-5.kaas" {
		t.Fatalf("advertised %+v", adv)
	}
	if adv := c.Advertised("PLAINTEXT", 1); adv.Host != "127.0.0.1" || adv.Port != 1 {
		t.Fatalf("advertised fallback %+v", adv)
	}
}

func TestBadSettingsAreRejected(t *testing.T) {
	for _, args := range [][]string{
		{"--listeners=nonsense"},
		{"--listeners=A://h:1,A://h:2"},
		{"--advertised.listeners=OTHER://h:1"},
		{"--listeners=INTERNAL://h:1"},
		{"--advertised.listeners=PLAINTEXT://0.0.0.0:9092"},
		{"--listener.security.protocol.map=PLAINTEXT:TLS"},
		{"--listener.security.protocol.map=nonsense"},
		{"--node.id=x"},
		{"--socket.request.max.bytes=0"},
		{"--group.min.session.timeout.ms=10", "--group.max.session.timeout.ms=5"},
		{"--log.format=xml"},
		{"--transaction.max.timeout.ms=0"},
		{"--transactional.id.expiration.ms=0"},
		{"--transaction.max.open=0"},
		{"--transaction.max.partitions=0"},
		{"--group.consumer.migration.policy=sideways"},
		{"stray"},
	} {
		if _, err := Parse(args, env(nil), &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if _, err := Parse(nil, env(map[string]string{"KAAS_NODE_ID": "x"}), &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "KAAS_NODE_ID") {
		t.Errorf("bad env value: %v", err)
	}
}

// group.consumer.migration.policy takes Apache's four values, case-insensitively.
func TestMigrationPolicySetting(t *testing.T) {
	c, err := Parse(nil, env(nil), &bytes.Buffer{})
	if err != nil || c.GroupConsumerMigrationPolicy != "bidirectional" {
		t.Fatalf("default %q, %v", c.GroupConsumerMigrationPolicy, err)
	}
	for in, want := range map[string]string{"UPGRADE": "upgrade", "downgrade": "downgrade", "Disabled": "disabled", "bidirectional": "bidirectional"} {
		c, err := Parse([]string{"--group.consumer.migration.policy=" + in}, env(nil), &bytes.Buffer{})
		if err != nil || c.GroupConsumerMigrationPolicy != want {
			t.Errorf("%s: %q, %v", in, c.GroupConsumerMigrationPolicy, err)
		}
	}
}

func TestHelpListsEverySettingWithDefault(t *testing.T) {
	var out bytes.Buffer
	_, err := Parse([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v", err)
	}
	for _, r := range Table() {
		if !strings.Contains(out.String(), "--"+r.Key+" (env "+r.Env+", default ") {
			t.Errorf("help lacks %s", r.Key)
		}
	}
	if EnvName("group.initial.rebalance.delay.ms") != "KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS" {
		t.Fatal(EnvName("group.initial.rebalance.delay.ms"))
	}
}

// TestReadmeTableListsEverySetting keeps the README's configuration table true.
func TestReadmeTableListsEverySetting(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Table() {
		d := r.Default
		if d == "" {
			d = `""`
		}
		row := "| `--" + r.Key + "` | `" + r.Env + "` | `" + d + "` |"
		if !strings.Contains(string(raw), row) {
			t.Errorf("README.md lacks the row %s", row)
		}
	}
}

// Every security protocol is served; an SSL listener needs its certificate and key, and
// the security settings are checked.
func TestSecurityProtocolsAndSettings(t *testing.T) {
	for _, args := range [][]string{
		{"--listeners=SSL://127.0.0.1:9093"},
		{"--listeners=SASL_SSL://127.0.0.1:9093", "--ssl.certificate.location=c.pem"},
		{"--listeners=CLIENT://127.0.0.1:9093", "--listener.security.protocol.map=CLIENT:SSL", "--ssl.key.location=k.pem"},
	} {
		_, err := Parse(args, env(nil), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "ssl.certificate.location and --ssl.key.location") {
			t.Errorf("%v: %v, want a refusal naming the missing PEM files", args, err)
		}
	}
	for _, args := range [][]string{
		{"--listeners=SASL_PLAINTEXT://127.0.0.1:9093", "--sasl.enabled.mechanisms=GSSAPI"},
		{"--listeners=SASL_PLAINTEXT://127.0.0.1:9093", "--sasl.enabled.mechanisms="},
		{"--authorizer=acl"},
		{"--super.users=admin"},
		{"--ssl.client.auth=always"},
	} {
		if _, err := Parse(args, env(nil), &bytes.Buffer{}); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	c, err := Parse([]string{"--listeners=CLIENT://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094,SSL://127.0.0.1:9095",
		"--listener.security.protocol.map=client:sasl_plaintext,SASL_SSL:SASL_SSL,SSL:SSL",
		"--ssl.certificate.location=c.pem", "--ssl.key.location=k.pem", "--ssl.client.auth=required",
		"--sasl.enabled.mechanisms=plain,SCRAM-SHA-512", "--authorizer=simple", "--super.users=User:admin;User:CN=ops,O=x"}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.UsesSASL("CLIENT") || c.UsesTLS("CLIENT") || !c.UsesSASL("SASL_SSL") || !c.UsesTLS("SASL_SSL") || !c.UsesTLS("SSL") || c.UsesSASL("SSL") {
		t.Errorf("protocols: %v", c.SecurityProtocolMap)
	}
	if strings.Join(c.SASLMechanisms, ",") != "PLAIN,SCRAM-SHA-512" {
		t.Errorf("mechanisms %v", c.SASLMechanisms)
	}
}

// A listener on every interface is advertised under the host's name (Apache's
// canonical host name), never as 0.0.0.0, which would send clients to themselves.
func TestUnspecifiedListenerIsAdvertisedByHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name")
	}
	c, err := Parse([]string{"--listeners=PLAINTEXT://0.0.0.0:9092,OTHER://[::]:9093", "--listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"PLAINTEXT", "OTHER"} {
		if adv := c.Advertised(name, 0); adv.Host != host {
			t.Fatalf("%s advertised as %q, want the host name %q", name, adv.Host, host)
		}
	}
}

// Apache's connection limits: unlimited by default, overrides parsed as Apache's
// parseCsvMap does (split on commas, the count after the last colon, so an IPv6 address
// may be a key), and every bad entry refused at start.
func TestConnectionLimits(t *testing.T) {
	c, err := Parse(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxConnections != math.MaxInt32 || c.MaxConnectionsPerIP != math.MaxInt32 || len(c.MaxConnectionsPerIPOverrides) != 0 {
		t.Fatalf("defaults: max %d, per ip %d, overrides %v", c.MaxConnections, c.MaxConnectionsPerIP, c.MaxConnectionsPerIPOverrides)
	}
	c, err = Parse([]string{"--max.connections=100", "--max.connections.per.ip=0",
		"--max.connections.per.ip.overrides= 127.0.0.1:5 , kaas-0.kaas:20,::1:3,[fe80::1]:0"},
		env(map[string]string{"KAAS_MAX_CONNECTIONS_PER_IP": "7"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"127.0.0.1": 5, "kaas-0.kaas": 20, "::1": 3, "fe80::1": 0}
	if c.MaxConnections != 100 || c.MaxConnectionsPerIP != 0 || !maps.Equal(c.MaxConnectionsPerIPOverrides, want) {
		t.Fatalf("max %d, per ip %d, overrides %v; want 100, 0, %v", c.MaxConnections, c.MaxConnectionsPerIP, c.MaxConnectionsPerIPOverrides, want)
	}
	for _, args := range [][]string{
		{"--max.connections.per.ip.overrides=127.0.0.1"},
		{"--max.connections.per.ip.overrides=127.0.0.1:x"},
		{"--max.connections.per.ip.overrides=127.0.0.1:-1"},
		{"--max.connections.per.ip.overrides=:5"},
		{"--max.connections.per.ip.overrides=a b:5"},
		{"--max.connections.per.ip.overrides=h:1,h:2"},
		{"--max.connections.per.ip=0"}, // Apache: zero only with overrides
		{"--max.connections.per.ip=-1"},
		{"--max.connections=0"},
		{"--max.connections=x"},
	} {
		if _, err := Parse(args, env(nil), &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// The inter-broker listener is the first by default; one that names no listener, one
// that is not the first while --registry.peers gives first-listener addresses only, a
// SASL one with half its credentials, and an unknown mechanism are refused.
func TestInterBrokerSettings(t *testing.T) {
	two := "--listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093"
	c, err := Parse([]string{two}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.InterBrokerListenerName(); got != "PLAINTEXT" {
		t.Errorf("default inter-broker listener %q, want the first, PLAINTEXT", got)
	}
	for _, args := range [][]string{
		{two, "--inter.broker.listener.name=INTERNAL"},
		{two, "--inter.broker.listener.name=SASL_PLAINTEXT", "--registry=static", "--registry.peers=0@127.0.0.1:9092"},
		{two, "--inter.broker.listener.name=SASL_PLAINTEXT", "--inter.broker.sasl.username=broker"},
		{two, "--inter.broker.listener.name=SASL_PLAINTEXT", "--sasl.mechanism.inter.broker.protocol=GSSAPI"},
		{"--inter.broker.request.timeout.ms=0"},
		{"--inter.broker.max.in.flight.requests=0"},
	} {
		if _, err := Parse(args, env(nil), &bytes.Buffer{}); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	c, err = Parse([]string{two, "--inter.broker.listener.name=SASL_PLAINTEXT", "--inter.broker.sasl.username=broker",
		"--inter.broker.sasl.password.file=/run/secrets/broker", "--sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256"}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.InterBrokerListenerName() != "SASL_PLAINTEXT" || c.InterBrokerSASLMechanism != "SCRAM-SHA-256" {
		t.Errorf("inter-broker settings not taken: %+v", c)
	}
}
