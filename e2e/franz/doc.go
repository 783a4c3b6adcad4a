// Package franz is the scenario's franz-go client: a kgo producer, kgo classic-group members
// (dynamic or static, any balancer) and the kadm admin. The kgo client program runs it, and
// the checks of the non-Go clients use its admin where their libraries have none.
package franz
