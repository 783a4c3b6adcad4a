package broker

import (
	"fmt"

	"kaas/actors/group"
)

// startGroups starts the groups manager (actors/group) and sets Env.Groups.
func (b *Broker) startGroups() error {
	pid, err := group.NewManager(b.sys, &b.cfg, b.log, b.met.Registry)
	if err != nil {
		return fmt.Errorf("start groups manager: %w", err)
	}
	b.env.Groups = pid
	return nil
}
