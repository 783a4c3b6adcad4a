// Package kube is the kubernetes registry source: the brokers are the pods behind the
// brokers' headless Service, read from its discovery.k8s.io/v1 EndpointSlices through a
// client-go informer in the Service's namespace.
//
//   - A slice belongs to the Service when its `kubernetes.io/service-name` label names it.
//     The informer lists with that label selector, and every slice is checked again here:
//     client-go's fake clientset applies selectors to List but not to Watch, and a source
//     must not trust a watch to have filtered.
//   - Broker id = the pod's StatefulSet ordinal, the trailing `-N` of the endpoint's
//     hostname (the pod's hostname, `<sts>-N`) or else of its targetRef name. Endpoints
//     without an ordinal, or with one outside 0..size-1, are ignored.
//   - Alive = `serving` and not `terminating` (nil serving reads true, nil terminating
//     false, as the API documents). `ready` is not read: the brokers' Service publishes
//     not-ready addresses, so the controller marks every endpoint ready, and `ready` of a
//     terminating pod is false although it still serves its last requests.
//   - A pod listed by several slices (dual-stack families, a controller moving endpoints
//     between slices) is alive when any of them says so.
//   - Brokers 0..size-1 are always in the set; one without an endpoint is not alive.
//   - Where clients reach a broker is the Mapper's answer, never an address read from a
//     slice: the default maps every listener to `<hostname>.<service>.<namespace>.svc`
//     and the port that broker advertises on it (all brokers of a StatefulSet advertise the
//     same ports), and tests map pods to loopback ports.
//
// The source marks the registry synced once the informer's cache has synced and the first
// complete view is set. RBAC: endpointslices (discovery.k8s.io) get, list, watch in the
// namespace.
package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"kaas/logs"
	"kaas/registry"
)

// Mapper returns a broker's endpoints by listener name, from its pod name, ordinal and
// endpoint. An error leaves the broker out of the alive set (logged).
type Mapper func(podName string, ordinal int32, ep discoveryv1.Endpoint) (map[string]registry.Endpoint, error)

// Config is what a Source needs.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	Service   string // the headless Service of the brokers
	Size      int    // the full broker set: ordinals 0..Size-1
	// Mapper maps a pod to its endpoints; nil: DNSMapper(Service, Namespace, Ports).
	Mapper Mapper
	// Ports is each listener's advertised port, for the default mapper.
	Ports map[string]int32
	// Resync is the informer's resync period (0: none; every resync re-derives the set
	// from the cache, which changes nothing when nothing changed).
	Resync time.Duration
	Log    zerolog.Logger
}

// DNSMapper maps a pod to `<hostname>.<service>.<namespace>.svc` on every listener, with
// that listener's port from ports.
func DNSMapper(service, namespace string, ports map[string]int32) Mapper {
	return func(podName string, _ int32, ep discoveryv1.Endpoint) (map[string]registry.Endpoint, error) {
		host := podName
		if ep.Hostname != nil && *ep.Hostname != "" {
			host = *ep.Hostname
		}
		if len(ports) == 0 {
			return nil, errors.New("no listener ports to advertise")
		}
		out := make(map[string]registry.Endpoint, len(ports))
		for name, port := range ports {
			out[name] = registry.Endpoint{Host: fmt.Sprintf("%s.%s.%s.svc", host, service, namespace), Port: port}
		}
		return out, nil
	}
}

// Source is the kubernetes registry source.
type Source struct {
	cfg    Config
	log    zerolog.Logger
	mapLim *logs.Limiter // broker_endpoint_unmapped repeats on every rebuild

	mu           sync.Mutex // serializes rebuilds (informer handlers and the initial sync)
	lastIgnored  string
	afterRebuild func() // tests: called after every rebuild
}

// New returns a source for cfg.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, errors.New("registry/kube: no kubernetes client")
	}
	if cfg.Service == "" || cfg.Namespace == "" {
		return nil, errors.New("registry/kube: service and namespace are required")
	}
	if cfg.Size < 1 {
		return nil, fmt.Errorf("registry/kube: cluster size %d, want at least 1", cfg.Size)
	}
	if cfg.Mapper == nil {
		cfg.Mapper = DNSMapper(cfg.Service, cfg.Namespace, cfg.Ports)
	}
	return &Source{
		cfg:    cfg,
		mapLim: logs.NewLimiter(10 * time.Second),
		log:    cfg.Log.With().Str("component", "registry_kube").Str("namespace", cfg.Namespace).Str("service", cfg.Service).Logger(),
	}, nil
}

// Run watches the Service's EndpointSlices and sets r from them until ctx ends. It marks
// r synced once the informer's cache has synced; it returns an error if ctx ends first.
func (s *Source) Run(ctx context.Context, r *registry.Registry) error {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.cfg.Service})
	factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, s.cfg.Resync,
		informers.WithNamespace(s.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	inf := factory.Discovery().V1().EndpointSlices()
	lister := inf.Lister().EndpointSlices(s.cfg.Namespace)
	informer := inf.Informer()

	synced := false
	var syncedMu sync.Mutex
	rebuild := func() {
		syncedMu.Lock()
		ok := synced
		syncedMu.Unlock()
		if ok { // before the sync the initial rebuild below sets the first full view
			s.rebuild(lister, r)
		}
	}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { rebuild() },
		UpdateFunc: func(any, any) { rebuild() },
		DeleteFunc: func(any) { rebuild() },
	})
	if err != nil {
		return fmt.Errorf("registry/kube: add endpointslice handler: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown() // joins the informer goroutines

	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced, reg.HasSynced) {
		return fmt.Errorf("registry/kube: endpointslices of %s/%s not synced: %w", s.cfg.Namespace, s.cfg.Service, ctx.Err())
	}
	syncedMu.Lock()
	synced = true
	syncedMu.Unlock()
	s.rebuild(lister, r)
	r.MarkSynced()
	s.log.Info().Int("cluster_size", s.cfg.Size).Int("alive", len(r.Brokers())).Msg("registry_synced")
	<-ctx.Done()
	return nil
}

// rebuild sets r from every slice in the cache.
func (s *Source) rebuild(lister sliceLister, r *registry.Registry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := lister.List(labels.Everything())
	if err != nil { // the cache's lister does not fail; keep the last view if it does
		s.log.Error().Err(err).Msg("endpointslice_list_failed")
		return
	}
	var slices []*discoveryv1.EndpointSlice
	for _, sl := range all {
		if sl.Labels[discoveryv1.LabelServiceName] == s.cfg.Service {
			slices = append(slices, sl)
		}
	}
	brokers, ignored := s.brokers(slices)
	if ignored != s.lastIgnored { // logged when the set of ignored endpoints changes, not per event
		s.lastIgnored = ignored
		if ignored != "" {
			s.log.Warn().Str("endpoints", ignored).Msg("endpoints_ignored")
		}
	}
	before := r.Brokers()
	r.Set(brokers)
	if after := r.Brokers(); !sameIDs(before, after) {
		s.log.Info().Ints32("alive", ids(after)).Int("slices", len(slices)).Msg("brokers_changed")
	}
	if s.afterRebuild != nil {
		s.afterRebuild()
	}
}

type sliceLister interface {
	List(selector labels.Selector) ([]*discoveryv1.EndpointSlice, error)
}

// brokers derives the broker set from the Service's slices; ignored lists (bounded) the
// endpoints that name no broker of the cluster.
func (s *Source) brokers(slices []*discoveryv1.EndpointSlice) ([]registry.Broker, string) {
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	out := make([]registry.Broker, s.cfg.Size)
	for i := range out {
		out[i] = registry.Broker{ID: int32(i)}
	}
	var ignored []string
	for _, sl := range slices {
		for _, ep := range sl.Endpoints {
			pod := podName(ep)
			ord, ok := Ordinal(pod)
			if !ok || int(ord) >= s.cfg.Size {
				if len(ignored) < 8 {
					ignored = append(ignored, sl.Name+"/"+pod)
				}
				continue
			}
			b := &out[ord]
			alive := Serving(ep.Conditions)
			if b.Alive && !alive {
				continue // another slice already has this pod serving
			}
			eps, err := s.cfg.Mapper(pod, ord, ep)
			if err != nil {
				s.mapLim.Event(s.log.Warn()).Err(err).Str("pod", pod).Int32("broker", ord).Msg("broker_endpoint_unmapped")
				continue
			}
			b.Endpoints = eps
			b.Alive = alive
			if ep.Zone != nil && *ep.Zone != "" {
				z := *ep.Zone
				b.Rack = &z
			}
		}
	}
	return out, strings.Join(ignored, ",")
}

// Serving reports whether an endpoint's conditions make its broker alive: serving (nil
// reads true) and not terminating (nil reads false).
func Serving(c discoveryv1.EndpointConditions) bool {
	if c.Terminating != nil && *c.Terminating {
		return false
	}
	return c.Serving == nil || *c.Serving
}

// podName is the endpoint's pod: its hostname, else its targetRef's name.
func podName(ep discoveryv1.Endpoint) string {
	if ep.Hostname != nil && *ep.Hostname != "" {
		return *ep.Hostname
	}
	if ep.TargetRef != nil {
		return ep.TargetRef.Name
	}
	return ""
}

// Ordinal is the StatefulSet ordinal of a pod name `<sts>-N`.
func Ordinal(pod string) (int32, bool) {
	i := strings.LastIndexByte(pod, '-')
	if i <= 0 || i == len(pod)-1 || pod[i-1] == '-' { // a StatefulSet name never ends in '-'

		return 0, false
	}
	n, err := strconv.ParseInt(pod[i+1:], 10, 32)
	if err != nil || n < 0 || pod[i+1] == '+' || (len(pod) > i+2 && pod[i+1] == '0') {
		return 0, false
	}
	return int32(n), true
}

func ids(bs []registry.Broker) []int32 {
	out := make([]int32, len(bs))
	for i, b := range bs {
		out[i] = b.ID
	}
	return out
}

func sameIDs(a, b []registry.Broker) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID {
			return false
		}
	}
	return true
}
