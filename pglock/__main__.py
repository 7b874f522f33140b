from pglock.cli.runline import main

main()
