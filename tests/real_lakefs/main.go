// Command lakefs is lakeFS's own command, built from its Go module at the version go.mod pins.
package main

import "github.com/treeverse/lakefs/cmd/lakefs/cmd"

func main() { cmd.Execute() }
