// Package events is the wire format of the events payrecon sends to a
// shop, and the receiving half a shop imports.
//
// Only the standard library and database/sql: a shop imports it without
// importing payrecon.
package events
