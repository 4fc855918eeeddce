from gnnsys.cli import entry

entry()
