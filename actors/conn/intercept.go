package conn

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Intercept sees every connection at its frame boundary, the way kfake's ControlKey hooks
// see its requests: each request once it is decoded and before its handler runs (and
// says what to do with it), each response as it is completed, each connection as it
// closes. It is the chaos suite's hook (faults and the records its invariants check);
// never set in production, where it costs an atomic load and a nil check per request.
// Its methods run in the connection actor's turn and must not block. conn names the
// connection (its remote address).
type Intercept interface {
	// Request: c.Req is nil for an ApiVersions of a version the broker does not speak
	// (answered with its table, whatever Request returns).
	Request(conn string, c *Call) Action
	// Response is called for every completion of c, a second one included (which the
	// connection then ignores): resp may be nil (a Produce with acks=0).
	Response(conn string, c *Call, resp kmsg.Response)
	Closed(conn string)
}

// Action is what an Intercept makes of a request.
type Action struct {
	Kind ActionKind
	// Code is the error code of a Retriable answer.
	Code int16
}

// ActionKind is one thing an Intercept can do to a request.
type ActionKind uint8

const (
	// Pass handles the request as usual.
	Pass ActionKind = iota
	// ResetRequest closes the connection with the request read and not handled.
	ResetRequest
	// ResetResponse handles the request, then closes the connection with at most half
	// of its response written.
	ResetResponse
	// Retriable answers the request with Code without handling it, where the API's
	// response can carry it (Produce, OffsetCommit, OffsetFetch, JoinGroup, SyncGroup,
	// Heartbeat, LeaveGroup); any other request passes.
	Retriable
)

var intercept atomic.Pointer[interceptBox]

type interceptBox struct{ i Intercept }

// SetIntercept installs i for every connection of the process until the returned func
// is called. Tests only.
func SetIntercept(i Intercept) (restore func()) {
	old := intercept.Swap(&interceptBox{i: i})
	return func() { intercept.Store(old) }
}

// intercepted applies the installed Intercept to call; true when the call is dealt with.
func (a *connActor) intercepted(i Intercept, call *Call) bool {
	act := i.Request(a.remote.String(), call)
	switch act.Kind {
	case ResetRequest:
		a.closeFor(closeInjectedReset, noRequest(nil))
		return true
	case ResetResponse:
		call.tear = true
	case Retriable:
		if resp := retriableResponse(call.Req, act.Code); resp != nil {
			a.complete(call, resp)
			return true
		}
	}
	return false
}

// tear sends half of s's response to the writer and closes the connection: the client
// sees its request handled and the connection reset mid-response.
func (a *connActor) tear(s *slot) {
	half := len(s.bytes) / 2
	cut := int64(len(s.bytes) - half)
	a.unwritten.Add(-cut)
	a.env.ResponseBytes.Release(cut)
	s.bytes = s.bytes[:half]
	a.closeFor(closeInjectedResetMidResponse, noRequest(nil))
}

// retriableResponse is req answered with code and nothing else, or nil where the API's
// response has no place for it.
func retriableResponse(req kmsg.Request, code int16) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.HeartbeatRequest:
		return &kmsg.HeartbeatResponse{ErrorCode: code}
	case *kmsg.JoinGroupRequest:
		return &kmsg.JoinGroupResponse{ErrorCode: code, Generation: -1}
	case *kmsg.SyncGroupRequest:
		return &kmsg.SyncGroupResponse{ErrorCode: code}
	case *kmsg.LeaveGroupRequest:
		return &kmsg.LeaveGroupResponse{ErrorCode: code}
	case *kmsg.OffsetCommitRequest:
		resp := &kmsg.OffsetCommitResponse{}
		for _, t := range r.Topics {
			rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: code})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	case *kmsg.OffsetFetchRequest:
		if r.Version >= 8 {
			resp := &kmsg.OffsetFetchResponse{}
			for _, g := range r.Groups {
				resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: code})
			}
			return resp
		}
		if r.Version < 2 {
			return nil
		}
		return &kmsg.OffsetFetchResponse{ErrorCode: code}
	case *kmsg.ProduceRequest:
		resp := &kmsg.ProduceResponse{}
		for _, t := range r.Topics {
			rt := kmsg.ProduceResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.ProduceResponseTopicPartition{Partition: p.Partition, ErrorCode: code, BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	return nil
}
