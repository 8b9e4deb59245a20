(package_clause (package_identifier) @package)
(import_spec path: (_) @source) @import
