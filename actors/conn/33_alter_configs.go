package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// AlterConfigs (key 33), v0–v2 (KIP-133), deprecated for IncrementalAlterConfigs.
//
//	v1: same as v0. v2: flexible.
//
// The legacy whole-set replace: a TOPIC resource's overrides become exactly the configs
// given (one not named goes back to its default), validate_only; written and applied as
// IncrementalAlterConfigs' (alterconfigs.go); a GROUP resource's configs likewise
// (actors/partition/groupconfigs.go). BROKER resources: the whole set of the resource's
// dynamic configs is replaced likewise (actors/partition/brokerconfigs.go).
func init() { register(33, 0, 2, handleAlterConfigs) }

func handleAlterConfigs(c *Call) {
	req := c.Req.(*kmsg.AlterConfigsRequest)
	rs := make([]configResource, len(req.Resources))
	changes := make([]configChange, len(req.Resources))
	for i, r := range req.Resources {
		cr := configResource{typ: r.ResourceType, name: r.ResourceName, badOp: -1, legacy: true, values: map[string]string{}}
		ch := configChange{TopicConfigChange: partition.TopicConfigChange{Name: r.ResourceName, Replace: true, Configs: map[string]string{},
			Broker: r.ResourceType == kmsg.ConfigResourceTypeBroker}, Group: r.ResourceType == kmsg.ConfigResourceTypeGroupConfig}
		for _, cfg := range r.Configs {
			cr.names = append(cr.names, cfg.Name)
			cr.set = append(cr.set, cfg.Name)
			if cfg.Value == nil {
				cr.nulls = append(cr.nulls, cfg.Name)
				continue
			}
			ch.Configs[cfg.Name] = *cfg.Value
			cr.values[cfg.Name] = *cfg.Value
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
			for _, rr := range r.(*kmsg.AlterConfigsResponse).Resources {
				as = append(as, answerOf(rr.ErrorCode, rr.ErrorMessage))
			}
			return as
		},
	}
	alterTopicConfigs(c, out, writer, changes, req.ValidateOnly, fwd, func(out []*configAnswer) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
		for i, r := range req.Resources {
			rr := kmsg.NewAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			rr.ErrorCode, rr.ErrorMessage = out[i].code, out[i].errMsg()
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	})
}
