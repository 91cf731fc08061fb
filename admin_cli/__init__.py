"""mqadmin: the admin command line (click), one module per command group, built on ``client.Admin``."""
