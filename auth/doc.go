// Package auth holds who a client is and what it may do: principals, the SASL server
// mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over the credentials in
// <data.dir>/__cluster/users.json, and the ACL authorizer (--authorizer=simple) over
// <data.dir>/__cluster/acls.json, both files shared by every broker of the cluster and
// picked up when another broker changes them.
package auth
