(mod_item name: (identifier) @name !body) @mod
(use_declaration argument: (_) @argument) @use
