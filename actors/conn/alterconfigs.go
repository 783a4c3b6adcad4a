package conn

import (
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
	"kaas/peer"
)

// What AlterConfigs (33) and IncrementalAlterConfigs (44) share: Apache's
// ConfigAdminManager.preprocess checks (a resource given twice, a config given twice, a
// null value, the broker id, a broker config that cannot be changed at runtime or a bad
// value of one), and the gathering of the topic, group and broker resources' answers from
// the topics manager (the catalogue's writer keeps all three:
// actors/partition/alterconfigs.go, groupconfigs.go, brokerconfigs.go).

// configAnswer is one resource's outcome.
type configAnswer struct {
	code int16
	msg  string
}

// configResource is what preprocessing needs of one resource of either request.
type configResource struct {
	typ  kmsg.ConfigResourceType
	name string
	// names are the configs named, in order; nulls those given a null value where a
	// value is needed; set those a broker would have to change (SET, APPEND, SUBTRACT, or
	// every one in the legacy request).
	names, nulls, set []string
	badOp             int8   // an unknown operation (IncrementalAlterConfigs), or -1
	ops               []int8 // the operation of each config named (IncrementalAlterConfigs)
	legacy            bool
	// values are the values of the configs set (SET, or every one in the legacy request).
	values map[string]string
}

// preprocessConfigs answers what is answered without the topics manager: every resource
// but the topics and groups that passed and the broker resources that change something,
// whose index it lists in writer.
func preprocessConfigs(c *Call, rs []configResource) (out []*configAnswer, writer []int) {
	out = make([]*configAnswer, len(rs))
	type key struct {
		typ  kmsg.ConfigResourceType
		name string
	}
	first := map[key]int{}
	for i, r := range rs {
		k := key{r.typ, r.name}
		if j, ok := first[k]; ok {
			dup := &configAnswer{kerr.InvalidRequest.Code, "Each resource must appear at most once."}
			out[i], out[j] = dup, dup
			continue
		}
		first[k] = i
	}
	for i, r := range rs {
		if out[i] != nil {
			continue
		}
		if a := checkConfigResource(c, r); a != nil {
			out[i] = a
			continue
		}
		if r.typ == kmsg.ConfigResourceTypeTopic || r.typ == kmsg.ConfigResourceTypeGroupConfig ||
			r.typ == kmsg.ConfigResourceTypeBroker && (len(r.names) > 0 || r.legacy) {
			writer = append(writer, i)
			continue
		}
		out[i] = &configAnswer{} // a broker (or broker logger) resource that changes nothing
	}
	return out, writer
}

func checkConfigResource(c *Call, r configResource) *configAnswer {
	invalid := func(msg string) *configAnswer { return &configAnswer{kerr.InvalidRequest.Code, msg} }
	seen := map[string]bool{}
	for _, n := range r.names {
		if seen[n] {
			return invalid("Error due to duplicate config keys")
		}
		seen[n] = true
	}
	if len(r.nulls) > 0 {
		return invalid("Null value not supported for : " + strings.Join(r.nulls, ", "))
	}
	switch r.typ {
	case kmsg.ConfigResourceTypeTopic, kmsg.ConfigResourceTypeGroupConfig:
		return nil
	case kmsg.ConfigResourceTypeBroker:
		// A broker resource forwarded by another broker names that one.
		if r.name != "" && !strings.HasPrefix(c.ClientID, peer.ClientIDPrefix) {
			id, err := strconv.ParseInt(r.name, 10, 32)
			if err != nil {
				return invalid("Node id must be an integer, but it is: " + r.name)
			}
			if int32(id) != c.Env.NodeID {
				return invalid("Unexpected broker id, expected " + strconv.Itoa(int(c.Env.NodeID)) + ", but received " + r.name)
			}
		}
		if r.badOp >= 0 {
			return invalid("Unknown operations type " + strconv.Itoa(int(r.badOp)))
		}
		return checkBrokerChange(r)
	case kmsg.ConfigResourceTypeBrokerLogger:
		if !r.legacy {
			return checkLoggers(c, r)
		}
	}
	return invalid("Unknown resource type " + strconv.Itoa(int(r.typ)))
}

// checkBrokerChange checks the configs a BROKER resource sets as Apache's
// DynamicBrokerConfig.validateConfigs does: one kaas never changes at runtime is what
// Apache calls a config that cannot be updated dynamically (INVALID_REQUEST); one Apache
// changes at runtime but kaas reads at start only is refused as not applied
// (INVALID_CONFIG); a bad value is INVALID_REQUEST, as Apache's ConfigException there
// (KAFKA-13609). A DELETE of any name is no error: it removes a dynamic value if there is
// one.
func checkBrokerChange(r configResource) *configAnswer {
	var fixed, startOnly []string
	for _, n := range r.set {
		switch {
		case partition.IsDynamicBrokerConfig(n):
		case partition.IsStaticHere(n):
			startOnly = append(startOnly, n)
		default:
			fixed = append(fixed, n)
		}
	}
	if len(fixed) > 0 {
		return &configAnswer{kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(" + strings.Join(fixed, ", ") + ")"}
	}
	if len(startOnly) > 0 {
		return &configAnswer{kerr.InvalidConfig.Code, "kaas applies these broker configs at start only, not dynamically: Set(" + strings.Join(startOnly, ", ") + ")"}
	}
	for _, n := range r.set {
		if v, ok := r.values[n]; ok {
			if err := partition.CheckBrokerConfig(n, v); err != nil {
				return &configAnswer{kerr.InvalidRequest.Code, err.Error()}
			}
		}
	}
	return nil
}

// checkLoggers answers a BROKER_LOGGER resource as Apache's RuntimeLoggerManager does one
// naming loggers that do not exist: kaas has no loggers whose level can be changed at
// runtime (DescribeConfigs shows none), so a SET or DELETE names one that does not exist.
func checkLoggers(c *Call, r configResource) *configAnswer {
	invalid := func(msg string) *configAnswer { return &configAnswer{kerr.InvalidRequest.Code, msg} }
	id, err := strconv.ParseInt(r.name, 10, 32)
	if err != nil {
		return invalid("Node id must be an integer, but it is: " + r.name)
	}
	if self := strconv.Itoa(int(c.Env.NodeID)); int32(id) != c.Env.NodeID {
		return invalid("Unexpected node id. Expected " + self + ", but received " + self) // sic, Apache's
	}
	for i, op := range r.ops {
		switch kmsg.IncrementalAlterConfigOp(op) {
		case kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete:
			return &configAnswer{kerr.InvalidConfig.Code, "Logger " + r.names[i] + " does not exist!"}
		case kmsg.IncrementalAlterConfigOpAppend:
			return invalid("APPEND operation is not allowed for the BROKER_LOGGER resource")
		case kmsg.IncrementalAlterConfigOpSubtract:
			return invalid("SUBTRACT operation is not allowed for the BROKER_LOGGER resource")
		default:
			return invalid("Unknown operation type " + strconv.Itoa(int(op)) + " is not allowed for the BROKER_LOGGER resource")
		}
	}
	return nil
}

// alterTopicConfigs asks the topics manager for the topic, group and broker resources (writer,
// their indexes in request order) and then answers through build, which gets every
// resource's outcome in request order. fwd is how the request is forwarded to the
// catalogue's writer (forward.go).
func alterTopicConfigs(c *Call, out []*configAnswer, writer []int, changes []configChange,
	validateOnly bool, fwd configForward, build func([]*configAnswer) kmsg.Response) {
	msg := &partition.AlterTopicConfigs{ValidateOnly: validateOnly}
	var topics, groups []int
	for _, i := range writer {
		if changes[i].Group {
			groups = append(groups, i)
			msg.Groups = append(msg.Groups, changes[i].TopicConfigChange)
		} else {
			topics = append(topics, i)
			msg.Topics = append(msg.Topics, changes[i].TopicConfigChange)
		}
	}
	if len(writer) == 0 || noTopics(c) {
		for _, i := range topics {
			out[i] = &configAnswer{kerr.UnknownTopicOrPartition.Code, "The topic '" + changes[i].Name + "' does not exist."}
			if changes[i].Broker {
				out[i] = &configAnswer{kerr.UnknownServerError.Code, "this broker has no topic catalogue to keep dynamic broker configs in"}
			}
		}
		for _, i := range groups {
			out[i] = &configAnswer{kerr.UnknownServerError.Code, "this broker has no topic catalogue to keep group configs in"}
		}
		c.Respond(build(out))
		return
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		switch res := v.(type) {
		case []configAnswer: // the writer's, in request order
			reread := false
			for k, i := range writer {
				out[i] = &configAnswer{kerr.UnknownServerError.Code, "the controller left the resource out"}
				if k < len(res) {
					out[i] = &res[k]
					reread = reread || changes[i].Broker && res[k].code == 0 && !validateOnly
				}
			}
			if reread {
				// Applied here at once rather than at the next catalogue tick.
				c.Env.System.Send(c.Env.Topics, partition.ReadBrokerConfigsMessage())
			}
		case *partition.Created:
			for k, i := range topics {
				ti := res.Topics[k]
				out[i] = &configAnswer{ti.ErrorCode, ti.ErrorMessage}
			}
			for k, i := range groups {
				out[i] = &configAnswer{kerr.UnknownServerError.Code, "the controller left the resource out"}
				if k < len(res.Groups) {
					out[i] = &configAnswer{res.Groups[k].ErrorCode, res.Groups[k].ErrorMessage}
				}
			}
		}
		return build(out)
	})
	askWriter(c, msg, msg.Reply, fwd.request(writer), func(r kmsg.Response) any { return fwd.answers(r) })
}

// configChange is one resource's change as the topics manager takes it; Group: a GROUP
// resource (its Name the group id), else a TOPIC one.
type configChange struct {
	partition.TopicConfigChange
	Group bool
}

// configForward is how AlterConfigs or IncrementalAlterConfigs is forwarded: request
// makes the request of the resources listed (the topics, groups and broker resources
// that passed preprocessing; the writer keeps all three), answers reads the writer's
// answer to it, one per resource in order.
// pick is all's elements at idx, in idx's order: the resources a forward carries.
func pick[T any](all []T, idx []int) []T {
	out := make([]T, 0, len(idx))
	for _, i := range idx {
		out = append(out, all[i])
	}
	return out
}

type configForward struct {
	request func(resources []int) kmsg.Request
	answers func(kmsg.Response) []configAnswer
}

// answerOf is one resource's answer in a writer's response.
func answerOf(code int16, msg *string) configAnswer {
	a := configAnswer{code: code}
	if msg != nil && code != 0 {
		a.msg = *msg
	}
	return a
}

// errMsg is an answer's error message: null on success, as Apache's ApiError.NONE.
func (a *configAnswer) errMsg() *string {
	if a.code == 0 {
		return nil
	}
	m := a.msg
	if m == "" {
		m = kerr.ErrorForCode(a.code).Error()
	}
	return &m
}
