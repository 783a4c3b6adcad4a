package conn

import (
	"regexp"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions (key 18), v0–v4.
//
//	v1: throttle_time_ms. v2: no change. v3: flexible; client_software_name/version
//	(KIP-511). v4: no change (KIP-896 floor bump).
//
// The table advertised is exactly what the NN_name.go files registered, less
// ConsumerGroupHeartbeat and ConsumerGroupDescribe when the consumer group protocol is
// off (group.coordinator.rebalance.protocols).
func init() { register(apiVersionsKey, 0, 4, handleApiVersions) }

// clientSoftware is Apache's pattern for client_software_name and _version (KIP-511).
var clientSoftware = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

func handleApiVersions(c *Call) {
	req := c.Req.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if c.Version >= 3 && (!clientSoftware.MatchString(req.ClientSoftwareName) ||
		!clientSoftware.MatchString(req.ClientSoftwareVersion)) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		c.Respond(resp)
		return
	}
	fillApiVersions(resp, c.Env)
	if c.Version >= 3 && c.Env.Txns != nil {
		advertiseTxnVersion(resp)
	}
	c.Respond(resp)
}

// advertiseTxnVersion lists the transaction.version feature at 2 (KIP-890 part 2) as
// supported and finalized: clients use Produce v12's implicit add, TxnOffsetCommit v5 and
// EndTxn v5's epoch bump only when a broker finalizes it (franz-go checks
// FinalizedFeatures). The coordinator serves both versions, so level 0 stays supported.
func advertiseTxnVersion(resp *kmsg.ApiVersionsResponse) {
	sf := kmsg.NewApiVersionsResponseSupportedFeature()
	sf.Name, sf.MinVersion, sf.MaxVersion = "transaction.version", 0, 2
	resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
	ff := kmsg.NewApiVersionsResponseFinalizedFeature()
	ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = "transaction.version", 2, 2
	resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
	resp.FinalizedFeaturesEpoch = 1
}

// consumerProtocolKey: ConsumerGroupHeartbeat and ConsumerGroupDescribe, advertised
// only while the consumer group protocol is enabled, so that clients (kgo, librdkafka,
// the Java client) use the classic protocol otherwise.
func consumerProtocolKey(key int16) bool { return key == 68 || key == 69 }

func fillApiVersions(resp *kmsg.ApiVersionsResponse, env *Env) {
	table := supported()
	consumer := env != nil && env.Config != nil && env.Config.ConsumerProtocol()
	resp.ApiKeys = make([]kmsg.ApiVersionsResponseApiKey, 0, len(table))
	for _, a := range table {
		if !consumer && consumerProtocolKey(a.key) {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = a.key, a.min, a.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
}

// respondUnsupportedApiVersions answers an ApiVersions at a version this broker does not
// speak: UNSUPPORTED_VERSION with the table, encoded at v0 as Apache does.
func (a *connActor) respondUnsupportedApiVersions(c *Call) {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	fillApiVersions(resp, c.Env)
	c.Version = 0
	a.complete(c, resp)
}
