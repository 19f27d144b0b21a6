from hipevolve.app.cli import main

main()
