package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// IncrementalAlterConfigs (key 44), v0–v1 (KIP-339).
//
//	v1: flexible.
//
// TOPIC resources: SET, DELETE (back to the default), APPEND and SUBTRACT (list configs),
// each resource answered on its own, validate_only; the change is in the catalogue
// before the answer and applied to the running partitions (alterconfigs.go,
// actors/partition/alterconfigs.go). GROUP resources (KIP-848):
// consumer.session.timeout.ms and consumer.heartbeat.interval.ms of one group, SET and
// DELETE, validated as Apache's GroupConfig (APPEND and SUBTRACT refused: neither is a
// list; a config kaas does not apply is INVALID_CONFIG), kept in the catalogue and
// applied by the group's actor from its members' next heartbeat
// (actors/partition/groupconfigs.go). BROKER resources (the cluster-wide default "" or
// this broker's id): the broker defaults of the topic configs kaas applies are changed at
// runtime, kept with the catalogue and applied at once (actors/partition/brokerconfigs.go);
// any other is refused as Apache refuses a config that cannot be updated dynamically.
// BROKER_LOGGER resources: kaas has no runtime loggers; a change names one that does not
// exist.
func init() { register(44, 0, 1, handleIncrementalAlterConfigs) }

func handleIncrementalAlterConfigs(c *Call) {
	req := c.Req.(*kmsg.IncrementalAlterConfigsRequest)
	rs := make([]configResource, len(req.Resources))
	changes := make([]configChange, len(req.Resources))
	for i, r := range req.Resources {
		cr := configResource{typ: r.ResourceType, name: r.ResourceName, badOp: -1, values: map[string]string{}}
		ch := configChange{TopicConfigChange: partition.TopicConfigChange{Name: r.ResourceName, Broker: r.ResourceType == kmsg.ConfigResourceTypeBroker},
			Group: r.ResourceType == kmsg.ConfigResourceTypeGroupConfig}
		for _, cfg := range r.Configs {
			cr.names, cr.ops = append(cr.names, cfg.Name), append(cr.ops, int8(cfg.Op))
			op := partition.ConfigOp{Name: cfg.Name, Op: int8(cfg.Op)}
			if cfg.Value != nil {
				op.Value = *cfg.Value
			} else if cfg.Op != kmsg.IncrementalAlterConfigOpDelete {
				cr.nulls = append(cr.nulls, cfg.Name)
			}
			switch cfg.Op {
			case kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
				cr.set = append(cr.set, cfg.Name)
				if cfg.Op == kmsg.IncrementalAlterConfigOpSet && cfg.Value != nil {
					cr.values[cfg.Name] = *cfg.Value
				}
			case kmsg.IncrementalAlterConfigOpDelete:
			default:
				cr.badOp = int8(cfg.Op)
			}
			ch.Ops = append(ch.Ops, op)
		}
		rs[i], changes[i] = cr, ch
	}
	out, writer := preprocessConfigs(c, rs)
	fwd := configForward{
		request: func(idx []int) kmsg.Request {
			r := *req
			r.Resources = pick(req.Resources, idx)
			return &r
		},
		answers: func(r kmsg.Response) []configAnswer {
			var as []configAnswer
			for _, rr := range r.(*kmsg.IncrementalAlterConfigsResponse).Resources {
				as = append(as, answerOf(rr.ErrorCode, rr.ErrorMessage))
			}
			return as
		},
	}
	alterTopicConfigs(c, out, writer, changes, req.ValidateOnly, fwd, func(out []*configAnswer) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		for i, r := range req.Resources {
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			rr.ErrorCode, rr.ErrorMessage = out[i].code, out[i].errMsg()
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	})
}
