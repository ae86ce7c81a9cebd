"""The imperative shell: files, processes, inotify. Adapters make no scheduling decisions."""
