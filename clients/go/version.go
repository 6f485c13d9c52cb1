package idem

// Version is this client's version: the same as the idem server's it ships with
// (scripts/versions.txt lists every copy, and the test command checks that they agree). The module
// is tagged clients/go/v<Version> in idem's repository: `go get
// github.com/idem-dev/idem/clients/go@v<Version>` fetches it.
const Version = "0.1.0"
