package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kaas/registry"
)

// serviceAccountNamespace is where a pod's own namespace is mounted.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// RESTConfig is how a broker reaches the apiserver: the kubeconfig file when one is
// named, else the pod's service account (in a cluster), else the KUBECONFIG / ~/.kube
// rules of kubectl.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		} else if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("in-cluster kubernetes config: %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config (kubeconfig %q): %w", kubeconfig, err)
	}
	return cfg, nil
}

// Namespace is the namespace of the brokers' Service: the setting when given, else
// POD_NAMESPACE (the downward API), else the pod's service-account namespace.
func Namespace(setting string) (string, error) {
	if setting != "" {
		return setting, nil
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return "", fmt.Errorf("no registry.namespace, no POD_NAMESPACE and no %s: %w", serviceAccountNamespace, err)
	}
	if ns := strings.TrimSpace(string(b)); ns != "" {
		return ns, nil
	}
	return "", fmt.Errorf("%s is empty", serviceAccountNamespace)
}

// OrdinalMapper maps brokers by ordinal to fixed endpoints (by listener), whatever the
// slice says: loopback processes in tests, or a deployment that fronts each pod with its
// own address. An ordinal it does not know is an error (that broker stays not alive).
func OrdinalMapper(byOrdinal map[int32]map[string]registry.Endpoint) Mapper {
	return func(pod string, ord int32, _ discoveryv1.Endpoint) (map[string]registry.Endpoint, error) {
		eps, ok := byOrdinal[ord]
		if !ok {
			return nil, fmt.Errorf("no address for broker %d (pod %s)", ord, pod)
		}
		return eps, nil
	}
}
