package kube

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Namespace creates namespace ns if it is not there.
func Namespace(t testing.TB, cs kubernetes.Interface, ns string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
}

// HeadlessService creates the brokers' headless Service as the chart would: no cluster IP,
// publishNotReadyAddresses, selecting app=<sts>, port 9092.
func HeadlessService(t testing.TB, cs kubernetes.Interface, ns, name, sts string) {
	t.Helper()
	_, err := cs.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{"app": sts},
			Ports:    []corev1.ServicePort{{Name: "kafka", Port: 9092}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", ns, name, err)
	}
}

// BrokerSlice is the EndpointSlice the endpointslice controller writes for the headless
// Service `service` of StatefulSet `sts` with publishNotReadyAddresses, one endpoint per
// entry of serving (pod <sts>-N, fake IP 10.244.0.(10+N), ready always true, serving as
// given). Create it, then Update it with other serving values to play readiness changes.
func BrokerSlice(ns, service, sts string, serving ...bool) *discoveryv1.EndpointSlice {
	port, proto := int32(9092), corev1.ProtocolTCP
	portName, ready, notTerminating := "kafka", true, false
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: service + "-x7k2p", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "kaas-e2e"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	for i, s := range serving {
		name := fmt.Sprintf("%s-%d", sts, i)
		s := s
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.0.%d", 10+i)},
			Hostname:   &name,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &s, Terminating: &notTerminating},
		})
	}
	return sl
}
