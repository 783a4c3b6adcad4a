package partition

import "fmt"

// maxTopicNameLength is Apache's Topic.MAX_NAME_LENGTH.
const maxTopicNameLength = 249

// ValidateTopicName applies Apache's org.apache.kafka.common.internals.Topic.validate:
// not empty, not "." or "..", at most 249 characters of [a-zA-Z0-9._-]. A bad name is
// answered with INVALID_TOPIC_EXCEPTION. The same rules make a name a safe directory name.
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("Topic name is illegal, it can't be empty")
	case name == "." || name == "..":
		return fmt.Errorf("Topic name cannot be \".\" or \"..\"")
	case len(name) > maxTopicNameLength:
		return fmt.Errorf("Topic name is illegal, it can't be longer than %d characters, topic name: %s", maxTopicNameLength, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("Topic name %q is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'", name)
		}
	}
	return nil
}
