"""Settings read without a database: the config file, durations and their ranges, schedules,
what this build is (BUILD.json)."""
