from hipevolve.cli import main

main()
