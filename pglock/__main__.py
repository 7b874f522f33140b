from pglock.cli import main

main()
