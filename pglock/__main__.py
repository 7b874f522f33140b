from pglock.runline import main

main()
