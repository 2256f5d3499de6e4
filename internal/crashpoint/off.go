//go:build !failpoints

package crashpoint

// Hit does nothing: this build has no crash points.
func Hit(Point) {}

// Enabled reports whether this build can crash at its points.
const Enabled = false
