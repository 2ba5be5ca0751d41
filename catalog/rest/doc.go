// Package rest serves an Iceberg catalog (iceberg-go's catalog.Catalog,
// in rollwal the etcd catalog of package catalog) over the Apache Iceberg
// REST catalog protocol, read-only: what a reader (pyiceberg, iceberg-go,
// Spark, Trino, DuckDB) needs to find, load and scan a table, and nothing
// that writes. Tables are written by rollwal's merge, whose commits ride
// in etcd transactions with its own keys; a REST commit could not.
//
// # Served
//
//	GET  /v1/config                                   defaults {}, overrides {prefix}, endpoints
//	GET  /v1/{prefix}/namespaces[?parent=ns]          one level: a parent has none below it
//	GET  /v1/{prefix}/namespaces/{ns}                 namespace and properties
//	HEAD /v1/{prefix}/namespaces/{ns}                 204, or 404
//	GET  /v1/{prefix}/namespaces/{ns}/tables          table identifiers
//	GET  /v1/{prefix}/namespaces/{ns}/tables/{table}  LoadTableResult
//	HEAD /v1/{prefix}/namespaces/{ns}/tables/{table}  204, or 404
//	GET  /v1/{prefix}/namespaces/{ns}/views           always empty: the catalog has no views
//	POST /v1/{prefix}/namespaces/{ns}/tables/{table}/metrics   204, discarded
//
// {prefix} is Options.Prefix; without one the routes are /v1/namespaces/….
// GET /v1/config advertises the served endpoints above (without views and
// metrics), so clients that negotiate endpoints (iceberg-go, pyiceberg,
// Java 1.7+) never send a write at all.
//
// # Refused
//
// Every write the specification defines (create, commit, drop, rename or
// register a table, create, update or drop a namespace, views, multi-table
// transactions) is answered 403 ForbiddenException, "this catalog is
// read-only: tables are written by rollwal's merge", without reading the
// body or the catalog: every client maps 403 to its forbidden error and
// shows the message. Server-side scan planning and credential vending
// (…/plan, …/tasks, …/credentials) are 406 UnsupportedOperationException:
// the client plans the scan itself from the metadata. A method the
// specification does not define on a path is 405 with Allow; a path it
// does not define is 404. Errors are the specification's ErrorModel,
//
//	{"error":{"message":"…","type":"NoSuchTableException","code":404}}
//
// and never carry a stack: a 500 says only "internal error" and a
// reference that the log line of the error carries too.
//
// # Names
//
// A namespace in a path is its levels joined by the unit separator (%1F,
// the default namespace-separator). This catalog has one level, so a
// nested namespace cannot exist: it is 404 NoSuchNamespaceException (as
// a one-level Hive catalog answers), while a name the catalog refuses
// (catalog.ErrInvalidName: a character outside A-Z a-z 0-9 . _ -, too
// long, empty) is 400 BadRequestException.
//
// # Paging
//
// Lists page as the specification says: without pageToken the whole list
// comes in one response ("next-page-token": null); with pageToken (empty to
// start) at most pageSize entries come (at most Options.MaxPageSize, the
// default when pageSize is absent), and next-page-token continues after
// the last one. A token is the last name returned, opaque to the client
// (base64url), so paging keeps no state on the server and a table created
// or dropped between pages neither repeats nor skips the others. A list is
// read whole from the catalog for each page: rollwal's catalogs hold one
// namespace and one table per prefix.
//
// # Bounds
//
// A request target (path and query) longer than Options.MaxTargetBytes is
// 414; the catalog's work for one request is bounded by
// Options.RequestTimeout (503 ServiceUnavailableException past it). Bodies
// are never read. Connection limits and header timeouts are the caller's
// http.Server's and listener's.
//
// # Auth
//
// With Options.Tokens set, every request, /v1/config included, needs one
// of them as "Authorization: Bearer TOKEN" (compared in constant time);
// else 401 NotAuthorizedException with WWW-Authenticate. Clients send it
// from their "token" property. POST /v1/oauth/tokens (the deprecated OAuth
// exchange, used by clients given a "credential") is answered with the
// OAuth error unsupported_grant_type: this catalog issues no tokens.
package rest
