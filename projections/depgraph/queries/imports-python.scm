; Python imports anywhere in a file (grimp counts imports inside functions and TYPE_CHECKING too).
(import_statement) @import
(import_from_statement) @from
