// Package scenario is the end-to-end client scenario shared by every Go client program under
// e2e/clients: its settings, the records it produces, the tracker that proves none was lost,
// the scripted group events (leave, join, broker restart) and the admin checks.
package scenario
