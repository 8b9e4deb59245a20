(import_statement source: (string) @source) @import
(import_require_clause source: (string) @source) @require
(export_statement source: (string) @source) @export
((call_expression
   function: (identifier) @_fn
   arguments: (arguments . (string) @source)) @require
 (#eq? @_fn "require"))
(call_expression
  function: (import)
  arguments: (arguments . (string) @source)) @dynamic
