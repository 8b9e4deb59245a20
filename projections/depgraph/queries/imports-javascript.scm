(import_statement source: (string) @source) @import
(export_statement source: (string) @source) @export
((call_expression
   function: (identifier) @_fn
   arguments: (arguments . (string) @source)) @require
 (#eq? @_fn "require"))
(call_expression
  function: (import)
  arguments: (arguments . (string) @source)) @dynamic
